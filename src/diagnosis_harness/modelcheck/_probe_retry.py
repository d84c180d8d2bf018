"""One retry execution of a probe: the executor runs an operation that follows a script.

Theory of operation. :class:`RetryExecution` is made for one ``executor.execute(policy,
operation)`` (or ``execute_async``); its :meth:`~RetryExecution.operation` is the operation. Each
invocation is predicted on a fresh retry model (``attempt``, then ``succeed`` or ``fail`` with
``retry_allowed`` from the reference) and performs its scripted :class:`~._probe_script.Effect`
through the probe's own steps, so an effect is predicted and checked like any other step. When
the executor returns, :meth:`~RetryExecution.settle` predicts the gate that stopped it, if any,
and compares the execution record, the stop reason and what was returned or re-raised.

Invariant: an attempt is invoked only while the run is live (a gate read would pass); every
invocation is one pending attempt row of the reference, moved to the finished rows when the
execution ends, exactly as the executor records an execution only when it ends.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, final

from .. import AttemptOutcome, Boundary, HarnessFailure, RunTerminated, StopReason
from .._generated.tables import RETRY, RetryEvent, RetryState
from ._disagreement import Disagreement, disagree
from ._probe_prediction import KIND_OF_ERROR, compare_error
from ._probe_script import RETURN, Effect

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .. import ExecutionRecord, FailureKind, RetryPolicy
    from ._probe import RunProbe
    from ._probe_reference import AttemptRow
    from ._probe_script import Attempt

__all__ = ["RetryExecution"]

_now_ns = time.perf_counter_ns


@final
class RetryExecution:
    """One execution of ``policy`` on a probe's executor, the operation following ``script``.

    Past the script the operation returns. ``inner_ns`` is the time the operation spent in the
    probe's own predictions and checks, which is not the runtime's.
    """

    __slots__ = ("_invoked", "_policy", "_probe", "_problems", "_retry", "_script", "inner_ns")

    def __init__(self, probe: RunProbe, policy: RetryPolicy, script: Sequence[Attempt]) -> None:
        self._probe = probe
        self._policy = policy
        self._script = script
        self._retry = probe.models.new(RETRY)
        probe.prediction.ref.pending = []
        self._invoked: list[BaseException | object] = []  # what each invocation raised or returned
        self._problems: list[str] = []  # what an attempt found wrong (raised when execute ends)
        self.inner_ns = 0

    def operation(self) -> object:
        """The operation the executor retries: invocation ``len(invoked) + 1``, timed."""
        started = _now_ns()
        try:
            return self._attempt()
        finally:
            self.inner_ns += _now_ns() - started

    async def operation_async(self) -> object:
        return self.operation()

    def _attempt(self) -> object:
        """The operation's body: predict the attempt, perform its effect, return or raise."""
        probe, policy, prediction = self._probe, self._policy, self._probe.prediction
        number = len(self._invoked) + 1
        if not prediction.live():
            self._problems.append(
                f"{policy.name}: attempt {number} was invoked although the run is "
                f"{prediction.life_state.name} (now {prediction.ref.now_ns} ns, deadline "
                f"{prediction.config.deadline_ns} ns): the gate must have refused it"
            )
        if probe.on_attempt is not None:
            probe.on_attempt(number)
        prediction.take(self._retry, RETRY, RetryEvent.ATTEMPT, None)
        step = self._script[number - 1] if number <= len(self._script) else RETURN
        error = self._perform(step)
        if error is None and step.failure is None:
            outcome = object()
            self._invoked.append(outcome)
            prediction.ref.pending.append((policy.name, number, AttemptOutcome.SUCCEEDED, None))
            prediction.take(self._retry, RETRY, RetryEvent.SUCCEED, None)
            return outcome
        failure: BaseException
        kind: FailureKind
        if error is None:
            assert step.failure is not None
            failure = HarnessFailure(step.failure, f"scripted attempt {number}")
            kind = step.failure
        else:
            failure = error
            kind = KIND_OF_ERROR[type(error)]
        allowed = kind in policy.retryable and number < policy.max_attempts
        self._invoked.append(failure)
        prediction.ref.pending.append((policy.name, number, AttemptOutcome.FAILED, kind))
        prediction.take(self._retry, RETRY, RetryEvent.FAIL, allowed)
        raise failure

    def _perform(self, step: Attempt) -> RunTerminated | None:
        """The attempt's effect on the run, as a probe step; the refusal it met, if any."""
        if step.effect is Effect.CANCEL:
            self._probe.cancel(step.reason)
        elif step.effect is Effect.PASS_DEADLINE:
            self._probe.reach_deadline()
        elif step.effect is Effect.MODEL_CALL:
            return self._probe.reserve_model()
        elif step.effect is Effect.FINISH_RUN:
            self._probe.succeed()
        return None

    def settle(self, result: object, raised: BaseException | None) -> RetryState:
        """After the execution: predict the last gate, then compare everything it left."""
        if self._problems:
            raise disagree("; ".join(self._problems))
        if isinstance(raised, Disagreement):
            raise raised
        policy, probe = self._policy, self._probe
        what = f"execute({policy.name!r})"
        ref = probe.prediction.ref
        pending = ref.pending
        ref.attempts.extend(pending)
        ref.pending = []
        gate_error = self._last_gate(what)
        state = self._retry.state
        assert isinstance(state, RetryState)
        records = probe.executor.executions
        record = records[-1] if records else None
        if record is None or len(records) != probe.invariants.executions + 1:
            raise disagree(f"{what}: the executor did not record exactly one execution")
        probe.invariants.add_execution(policy, len(record.attempts))
        if record.state is not state:
            raise disagree(
                f"{what}: runtime ended in {record.state.name}, the model in {state.name}",
                model=state.name,
                runtime=record.state.name,
            )
        expected_stop = self._compare_answer(
            what, record, result, raised, gate_error=gate_error, rows=pending
        )
        if record.stop is not expected_stop:
            raise disagree(
                f"{what}: stop {record.stop.name}, expected {expected_stop.name}",
                model=expected_stop.name,
                runtime=record.stop.name,
            )
        if len(record.attempts) != len(self._invoked):
            raise disagree(
                f"{what}: {len(self._invoked)} invocations but {len(record.attempts)} attempt "
                "records"
            )
        return state

    def _last_gate(self, what: str) -> type[RunTerminated] | None:
        """The executor made no further attempt although it could: the gate must have refused."""
        retry = self._retry
        if retry.state not in (RetryState.READY, RetryState.AWAITING_RETRY):
            return None
        prediction = self._probe.prediction
        gate_error = prediction.gate()
        if gate_error is None:
            raise disagree(f"{what}: stopped in {retry.state.name} although the gate passes")
        prediction.take(retry, RETRY, RetryEvent.STOP, None)
        return gate_error

    def _compare_answer(
        self,
        what: str,
        record: ExecutionRecord,
        result: object,
        raised: BaseException | None,
        *,
        gate_error: type[RunTerminated] | None,
        rows: Sequence[AttemptRow],
    ) -> StopReason:
        """What the execution returned or raised is the table's answer; the stop it implies."""
        invoked = self._invoked
        if record.state is RetryState.SUCCEEDED:
            if raised is not None or not invoked or result is not invoked[-1]:
                raise disagree(
                    f"{what}: expected the last attempt's result, got {raised or result!r}"
                )
            return StopReason.SUCCEEDED
        if record.state is RetryState.FAILED:
            last = invoked[-1]
            if raised is not last:
                raise disagree(f"{what}: expected the operation's own {last!r}, got {raised!r}")
            kind = rows[-1][3]  # the last attempt's failure
            if kind in self._policy.retryable:
                return StopReason.ATTEMPTS_EXHAUSTED
            return StopReason.NOT_RETRYABLE
        termination = self._probe.ctx.lifecycle.termination
        compare_error(
            what,
            gate_error,
            raised,
            Boundary.RETRY,
            termination=termination,
            dimension=self._probe.prediction.ref.dimension,
        )
        if record.termination is not termination:
            raise disagree(f"{what}: the record's termination is not the run's")
        return StopReason.RUN_TERMINATED
