"""A tool call in flight when the run ends is cut (async) or abandoned (sync), in every adapter.

Each test stalls one tool call -- an async tool awaiting an Event nobody sets, a sync tool
blocked on a ``threading.Event`` the test sets only in teardown -- under the real pydantic-ai
(``FunctionModel``), the real openai-agents (its Chat Completions model on the loopback server)
or ``GovernedTools`` itself, and ends the run while it is known to be running: by the deadline
(``SystemClock``, 0.3 s) or by a cancel from another thread that waits for the tool to start.
Then it asserts what a user relies on: the caller gets the run's ``RunTimedOut`` /
``RunCancelled`` within the deadline (or the cancel) plus ``SLACK``; the journal says the call
was cut (async: failed with the ending's kind) or abandoned (sync: ``ABANDONED``, stopped
``RUN_TERMINATED`` with the run's termination); once released, the sync tool's late result
reaches nobody -- not the model, not the journal, not the byte budget -- and the boundary it
then asks refuses; every cancellation callback ran once.

Cost: about 0.3 s per deadline test, a few ms per cancel test, 2-3 s for the process-exit test
(it imports pydantic-ai in a child process).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from agents import Agent as SdkAgent
from agents import Runner, function_tool, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider

from diagnosis_harness import (
    AttemptOutcome,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    FailureKind,
    HarnessRetryExecutor,
    RunCancelled,
    RunContext,
    RunTerminated,
    RunTimedOut,
    StopReason,
)
from diagnosis_harness.integrations import (
    GovernedTools,
    ModelClientConfig,
    async_openai_client,
    classify_openai,
)
from diagnosis_harness.integrations.openai_agents import governed_tool, harness_run_config

from .loopback import LoopbackServer, Reply, ToolCall, serve

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

set_tracing_disabled(True)  # the SDK would otherwise try to export traces to OpenAI

DEADLINE = 0.3  # seconds
SLACK = 0.5  # scheduling on a loaded 2-core machine
STALL_LIMIT = 10.0  # a stall nobody cuts ends after this: the test then fails, it does not hang
LATE = "late result: the tool finished after the run had ended"
LIMITS = BudgetLimits(
    model_calls=5,
    tool_calls=5,
    per_tool_calls=5,
    input_tokens=100_000,
    output_tokens=100_000,
    total_tokens=200_000,
    run_bytes=100_000,
)

# The model's two answers: call the tool, then conclude.
_SCRIPT = (Reply(text="", tool_calls=(ToolCall("lookup", {}, "call_1"),)), Reply())
ADAPTERS = ("pydantic-ai", "openai-agents", "GovernedTools")
HAS_PYDANTIC_AI = sys.version_info >= (3, 11)  # pydantic-ai supports Python 3.11+ only
NEEDS_PYDANTIC_AI = pytest.mark.skipif(not HAS_PYDANTIC_AI, reason="pydantic-ai needs 3.11+")
ADAPTER_PARAMS = [
    pytest.param(adapter, marks=NEEDS_PYDANTIC_AI) if adapter == "pydantic-ai" else adapter
    for adapter in ADAPTERS
]
KINDS = ("async", "sync")
ENDINGS = ("deadline", "thread-cancel")


@dataclass
class Stall:
    """One stalled tool: when it started, on which thread, and what happened to it after."""

    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)  # set in teardown only
    threads: list[threading.Thread] = field(default_factory=list)
    cancelled: list[bool] = field(default_factory=list)  # an async tool saw its cancellation
    late_boundary: list[BaseException] = field(default_factory=list)

    def sync_tool(self, ctx: RunContext) -> str:
        self.threads.append(threading.current_thread())
        self.started.set()
        self.release.wait(STALL_LIMIT)  # set by the test once the run has ended
        try:  # the abandoned thread asks for more work: the ended run must grant nothing
            ctx.reserve_tool_call("after-the-end")
        except RunTerminated as refused:
            self.late_boundary.append(refused)
        return LATE

    async def async_tool(self) -> str:
        self.started.set()
        try:
            await asyncio.sleep(STALL_LIMIT)  # only the run's end stops it in time
        except asyncio.CancelledError:
            self.cancelled.append(True)
            raise
        return LATE

    def finish(self) -> None:
        """Release the stalled sync tool and wait for its thread: nothing leaks into later tests."""
        self.release.set()
        for thread in self.threads:
            if thread is threading.current_thread():
                continue  # the tool ran on the caller's thread: it has returned already
            thread.join(10)
            assert not thread.is_alive()


@pytest.fixture
def stall() -> Iterator[Stall]:
    stalled = Stall()
    yield stalled
    stalled.finish()


def _run(ending: str) -> RunContext:
    timeout = DEADLINE if ending == "deadline" else 60
    return RunContext.create(session_id="s-1", run_id="run-1", limits=LIMITS, timeout=timeout)


def _canceller(ctx: RunContext, stall: Stall, cancelled_at: list[float]) -> threading.Thread:
    """A thread that cancels the run once the tool is known to be running."""

    def cancel() -> None:
        assert stall.started.wait(30)
        cancelled_at.append(time.monotonic())
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)

    thread = threading.Thread(target=cancel, name="canceller")
    thread.start()
    return thread


# -- each adapter runs one agent turn that calls the stalled tool --------------------------------


@dataclass
class Turn:
    """What one agent turn exposes: the executor journaling its tool calls, what the model saw."""

    executor: HarnessRetryExecutor | None = None
    seen: list[str] = field(default_factory=list)

    def tool_execution(self) -> Any:
        assert self.executor is not None
        [execution] = [e for e in self.executor.executions if e.policy == "tool_call"]
        return execution


def _pydantic_ai(ctx: RunContext, stall: Stall, kind: str, turn: Turn, _: Any) -> None:
    # Imported here: pydantic-ai is not installed on Python 3.10, where the other adapters run.
    from pydantic_ai import Agent  # noqa: PLC0415 - 3.11+ only
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart  # noqa: PLC0415 - 3.11+ only
    from pydantic_ai.models.function import FunctionModel  # noqa: PLC0415 - 3.11+ only

    from diagnosis_harness.integrations.pydantic_ai import HarnessCapability  # noqa: PLC0415 - 3.11+ only

    def model(messages: list[Any], info: object) -> ModelResponse:
        turn.seen.append(repr(messages))
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {}, tool_call_id="call_1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model))
    if kind == "sync":

        @agent.tool_plain
        def lookup() -> str:
            return stall.sync_tool(ctx)
    else:

        @agent.tool_plain
        async def lookup() -> str:
            return await stall.async_tool()

    capability = HarnessCapability(ctx)
    turn.executor = capability.executor
    asyncio.run(agent.run("why?", capabilities=[capability]))


def _openai_agents(
    ctx: RunContext, stall: Stall, kind: str, turn: Turn, server: LoopbackServer
) -> None:
    server.script(*_SCRIPT)
    if kind == "sync":

        @function_tool
        def lookup() -> str:
            return stall.sync_tool(ctx)
    else:

        @function_tool
        async def lookup() -> str:
            return await stall.async_tool()

    client = async_openai_client(ModelClientConfig(base_url=server.openai_url), api_key="test")
    executor = turn.executor = HarnessRetryExecutor(ctx, classifier=classify_openai)
    config = harness_run_config(
        ctx,
        model_provider=OpenAIProvider(openai_client=client, use_responses=False),
        model="loopback-model",
        executor=executor,
    )
    agent = SdkAgent(name="diagnose", tools=[governed_tool(lookup)])
    try:  # Runner.run itself, not run_governed: the tool path alone must cut
        asyncio.run(Runner.run(agent, "why?", run_config=config))
    finally:
        turn.seen.extend(json.dumps(request.body) for request in server.requests)


def _governed_tools(ctx: RunContext, stall: Stall, kind: str, turn: Turn, _: Any) -> None:
    tools = GovernedTools(ctx)
    turn.executor = tools.executor
    if kind == "sync":
        turn.seen.append(tools.call("lookup", "call_1", stall.sync_tool, ctx))
    else:
        turn.seen.append(asyncio.run(tools.call_async("lookup", "call_1", stall.async_tool)))


RUNNERS: dict[str, Callable[[RunContext, Stall, str, Turn, LoopbackServer], None]] = {
    "pydantic-ai": _pydantic_ai,
    "openai-agents": _openai_agents,
    "GovernedTools": _governed_tools,
}


@pytest.fixture(scope="module")
def warm() -> None:
    """One untimed turn of each adapter with a tool that returns at once: the first turn in a
    process builds schemas and clients on the loop's thread, work no deadline can interrupt."""
    with serve() as server:
        for adapter in ADAPTERS if HAS_PYDANTIC_AI else ADAPTERS[1:]:
            stall = Stall()
            stall.release.set()
            ctx = RunContext.create(session_id="s-0", run_id="warm-up", limits=LIMITS, timeout=60)
            RUNNERS[adapter](ctx, stall, "sync", Turn(), server)
            stall.finish()


@pytest.mark.usefixtures("warm")
@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("adapter", ADAPTER_PARAMS)
def test_a_stalled_tool_call_ends_with_the_run(
    adapter: str, kind: str, ending: str, stall: Stall, loopback: LoopbackServer
) -> None:
    ctx = _run(ending)
    delivered: list[CancellationReason] = []
    ctx.cancellation.register(delivered.append)
    cancelled_at: list[float] = []
    canceller = _canceller(ctx, stall, cancelled_at) if ending == "thread-cancel" else None
    turn = Turn()
    returned: list[float] = []

    def run_the_turn() -> None:
        try:
            RUNNERS[adapter](ctx, stall, kind, turn, loopback)
        finally:
            returned.append(time.monotonic())
            if canceller is not None:
                stall.started.set()  # a run that failed early must not leave the canceller waiting
                canceller.join(10)

    started = time.monotonic()
    expected = RunTimedOut if ending == "deadline" else RunCancelled
    with pytest.raises(expected) as ended:
        run_the_turn()

    # -- the caller got the run's ending, by the deadline or the cancel ---------------------------
    since = started if ending == "deadline" else cancelled_at[0]
    bound = DEADLINE + SLACK if ending == "deadline" else SLACK
    held = returned[0] - since
    assert held < bound, f"{adapter} {kind} tool held the run {held:.2f} s"
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert ended.value.termination == termination

    # -- the journal says the call was cut (async) or abandoned (sync) ----------------------------
    execution = turn.tool_execution()
    [attempt] = execution.attempts
    cause = FailureKind.DEADLINE_EXCEEDED if ending == "deadline" else FailureKind.CANCELLED
    assert attempt.failure is cause
    if kind == "sync":
        assert attempt.outcome is AttemptOutcome.ABANDONED
        assert execution.stop is StopReason.RUN_TERMINATED
        assert execution.termination == termination
    else:
        assert attempt.outcome is AttemptOutcome.FAILED
        assert stall.cancelled == [True]

    # -- released, the late result reaches nobody, and the ended run grants it nothing ------------
    stall.finish()
    assert not any(LATE in text for text in turn.seen)
    usage = ctx.budget.snapshot()
    assert (usage.tool_calls, usage.run_bytes) == (1, 0)  # the late result's bytes: never reserved
    if kind == "sync":
        assert [type(refused) for refused in stall.late_boundary] == [expected]
    assert turn.tool_execution() == execution  # nothing recorded for it later
    assert len(delivered) == 1  # every callback once


# A child process whose sync tools never return: each adapter abandons its call at the deadline,
# and the process exits at once, its abandoned threads (daemon) not waited for.
_CHILD = """
import asyncio, threading
from agents import Agent as SdkAgent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from diagnosis_harness import BudgetLimits, RunContext, RunTimedOut
from diagnosis_harness.integrations import GovernedTools
from diagnosis_harness.integrations.openai_agents import governed_tool, harness_run_config
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability

set_tracing_disabled(True)
never = threading.Event()  # nobody sets it: the tools never return
limits = BudgetLimits(model_calls=5, tool_calls=5, per_tool_calls=5, input_tokens=10**5,
                      output_tokens=10**5, total_tokens=10**6, run_bytes=10**6)

def run(name):
    return RunContext.create(session_id="s", run_id=name, limits=limits, timeout=0.2)

def model(messages, info):
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("lookup", {}, tool_call_id="call_1")])
    return ModelResponse(parts=[TextPart("done")])

agent = Agent(FunctionModel(model))

@agent.tool_plain
def lookup() -> str:
    never.wait()
    return "never"

@function_tool
def sdk_lookup() -> str:
    never.wait()
    return "never"

scripted = ScriptedModel([[function_call("sdk_lookup", {}, call_id="call_1")],
                          [assistant_message("done")]])
turns = {
    "pydantic-ai": lambda ctx: asyncio.run(
        agent.run("why?", capabilities=[HarnessCapability(ctx)])),
    "openai-agents": lambda ctx: asyncio.run(Runner.run(
        SdkAgent(name="a", tools=[governed_tool(sdk_lookup)]), "why?",
        run_config=harness_run_config(ctx, model=scripted))),
    "GovernedTools": lambda ctx: GovernedTools(ctx).call("lookup", "call_1", never.wait),
}
for name, turn in turns.items():
    try:
        turn(run(name))
    except RunTimedOut:
        print(name, "timed out")
"""


@NEEDS_PYDANTIC_AI
def test_abandoned_tool_threads_do_not_keep_the_process_from_exiting() -> None:
    # Before: anyio's worker thread (pydantic-ai) and the loop's default executor (openai-agents'
    # asyncio.to_thread) were waited for at exit, and GovernedTools.call ran the tool itself.
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD)],
        capture_output=True,
        text=True,
        timeout=120,  # mostly imports on a loaded machine; a process that waits never ends
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split("\n")[:3] == [f"{name} timed out" for name in ADAPTERS]


# -- a granted call outlives a sibling's refusal, but not the deadline --------------------------


@pytest.mark.parametrize("method", ["call_async", "call_in_thread", "call"])
@pytest.mark.parametrize("released", [True, False], ids=["released", "stalls-on"])
def test_a_granted_call_is_not_cut_by_a_siblings_refusal_only_by_the_deadline(
    method: str, released: bool, stall: Stall
) -> None:
    # A refusal elsewhere ends the run BUDGET_EXHAUSTED; the call that fit was granted and keeps
    # running (cutting it would leave a call that fit half done) -- until the deadline.
    limits = dataclasses.replace(LIMITS, tool_calls=1)
    ctx = RunContext.create(session_id="s-1", run_id="run-1", limits=limits, timeout=DEADLINE)
    tools = GovernedTools(ctx)
    finished: list[str] = []

    def tool() -> str:
        stall.threads.append(threading.current_thread())
        stall.started.set()
        if stall.release.wait(STALL_LIMIT):
            finished.append("ran to its end")
        return LATE

    wake: list[Callable[[], object]] = []  # sets the async tool's release, from any thread

    async def async_tool() -> str:
        release = asyncio.Event()
        loop = asyncio.get_running_loop()
        wake.append(lambda: loop.call_soon_threadsafe(release.set))
        stall.started.set()
        try:
            await asyncio.wait_for(release.wait(), STALL_LIMIT)
        except asyncio.CancelledError:
            stall.cancelled.append(True)
            raise
        finished.append("ran to its end")
        return LATE

    def granted() -> str:
        if method == "call":
            return tools.call("lookup", "call_1", tool)
        if method == "call_in_thread":
            return asyncio.run(tools.call_in_thread("lookup", "call_1", tool))
        return asyncio.run(tools.call_async("lookup", "call_1", async_tool))

    def refused_sibling() -> None:
        assert stall.started.wait(30)
        with pytest.raises(BudgetExhausted):
            tools.call("lookup", "call_2", str)
        if released:
            stall.release.set()
            for release in wake:
                release()

    sibling = threading.Thread(target=refused_sibling)
    sibling.start()
    started = time.monotonic()
    # Its result's bytes are refused (the run has ended): the run's own ending, either way.
    with pytest.raises(BudgetExhausted):
        granted()
    held = time.monotonic() - started
    sibling.join(10)

    assert held < DEADLINE + SLACK
    refusal, execution = tools.executor.executions  # the granted call's ended last
    assert refusal.attempts[0].failure is FailureKind.BUDGET_EXHAUSTED
    assert ctx.budget.snapshot().tool_calls == 1
    if released:  # it finished, untouched by the refusal
        assert finished == ["ran to its end"]
        assert stall.cancelled == []
        assert execution.attempts[0].outcome is AttemptOutcome.SUCCEEDED
    else:  # the deadline cut it: cancelled, or abandoned in its thread
        stall.finish()
        assert held >= DEADLINE - 0.05
        outcome = AttemptOutcome.FAILED if method == "call_async" else AttemptOutcome.ABANDONED
        assert execution.attempts[0].outcome is outcome
        assert execution.attempts[0].failure is FailureKind.BUDGET_EXHAUSTED  # the run's ending
        assert stall.cancelled == ([True] if method == "call_async" else [])
