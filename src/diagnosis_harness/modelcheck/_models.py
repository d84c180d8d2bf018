"""The python-statemachine models generated from ``model/``, as the probe steps them.

Theory of operation. The models decide every state a check expects. :class:`LiveModels` gives
real instances, one per table per run (per execution for retry): the Hypothesis machines use
them. :class:`MemoModels` gives the models' answer to (state, event, guard), each computed once
by a real instance and reused: python-statemachine costs about 95 us per event and the explorer
applies hundreds of thousands; the generated models carry no data besides their state, so the
memo is exact. :class:`ModelTiming` counts where a probe's time went.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from statemachine.exceptions import TransitionNotAllowed

from .._generated.models import BudgetModel, LifecycleModel, RetryModel
from .._generated.tables import BUDGET, LIFECYCLE, RETRY
from ._disagreement import Disagreement

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from statemachine import StateMachine

    from .._machine import MachineTable

__all__ = ["LiveModels", "MemoModels", "ModelInstance", "ModelRunner", "ModelTiming"]

_now_ns = time.perf_counter_ns


class ModelInstance(Protocol):
    """One python-statemachine model of one table, stepped by (event, guard value)."""

    @property
    def state(self) -> enum.Enum: ...

    def fire(self, event: enum.Enum, guard: bool | None) -> enum.Enum | None:
        """The new state, or ``None`` when the model refused (``TransitionNotAllowed``)."""
        ...


class ModelRunner(Protocol):
    """Makes :class:`ModelInstance` objects for the tables."""

    def new(self, table: MachineTable[Any, Any]) -> ModelInstance: ...


@final
@dataclass(slots=True)
class ModelTiming:
    """Where a probe's time went: in the runtime under test, and in the models."""

    runtime_ns: int = 0
    model_ns: int = 0
    model_events: int = 0
    runtime_calls: int = 0

    def add(self, other: ModelTiming) -> None:
        self.runtime_ns += other.runtime_ns
        self.model_ns += other.model_ns
        self.model_events += other.model_events
        self.runtime_calls += other.runtime_calls


_MODEL_CLASSES: Final[Mapping[str, type[StateMachine]]] = MappingProxyType(
    {LIFECYCLE.name: LifecycleModel, BUDGET.name: BudgetModel, RETRY.name: RetryModel}
)


def _guards(table: MachineTable[Any, Any], guard: bool | None) -> dict[str, bool]:
    return {} if guard is None else dict.fromkeys(table.guards, guard)


def _send(
    model: StateMachine, table: MachineTable[Any, Any], event: enum.Enum, guard: bool | None
) -> bool:
    """Fire ``event`` on a live model through its typed ``fire``; False if not allowed."""
    fire: Callable[..., None] = model.fire  # type: ignore[attr-defined]  # every generated one has
    try:
        fire(event.value, **_guards(table, guard))
    except TransitionNotAllowed:
        return False
    return True


def _model_state(model: StateMachine) -> enum.Enum:
    value = model.current_state_value
    assert isinstance(value, enum.Enum)
    return value


@final
class _LiveInstance:
    __slots__ = ("_model", "_table", "_timing")

    def __init__(self, table: MachineTable[Any, Any], timing: ModelTiming) -> None:
        self._table = table
        self._timing = timing
        started = _now_ns()
        self._model = _MODEL_CLASSES[table.name]()
        timing.model_ns += _now_ns() - started

    @property
    def state(self) -> enum.Enum:
        return _model_state(self._model)

    def fire(self, event: enum.Enum, guard: bool | None) -> enum.Enum | None:
        timing = self._timing
        started = _now_ns()
        taken = _send(self._model, self._table, event, guard)
        state = _model_state(self._model)
        timing.model_ns += _now_ns() - started
        timing.model_events += 1
        return state if taken else None


@final
class LiveModels:
    """Real python-statemachine instances, one per table per run (per execution for retry)."""

    __slots__ = ("timing",)

    def __init__(self, timing: ModelTiming | None = None) -> None:
        self.timing = ModelTiming() if timing is None else timing

    def new(self, table: MachineTable[Any, Any]) -> ModelInstance:
        return _LiveInstance(table, self.timing)


def _paths(table: MachineTable[Any, Any]) -> dict[enum.Enum, list[tuple[enum.Enum, bool | None]]]:
    """A shortest (event, guard) path to every state, over the table's rows."""
    paths: dict[enum.Enum, list[tuple[enum.Enum, bool | None]]] = {table.initial: []}
    queue = deque([table.initial])
    while queue:
        state = queue.popleft()
        for row in table.rows:
            if row.source is state and row.target not in paths:
                guard = None if row.guard is None else row.expect
                paths[row.target] = [*paths[state], (row.event, guard)]
                queue.append(row.target)
    return paths


@final
class _MemoInstance:
    __slots__ = ("_memo", "_state", "_table")

    def __init__(self, table: MachineTable[Any, Any], memo: MemoModels) -> None:
        self._table = table
        self._memo = memo
        self._state: enum.Enum = table.initial

    @property
    def state(self) -> enum.Enum:
        return self._state

    def fire(self, event: enum.Enum, guard: bool | None) -> enum.Enum | None:
        after = self._memo.answer(self._table, self._state, event, guard)
        if after is not None:
            self._state = after
        return after


@final
class MemoModels:
    """The models' answers to (state, event, guard), each computed once by a real instance.

    Exact for the generated models: they hold no data besides their state, so the answer depends
    on nothing else. ``answers`` counts the real model events it took.
    """

    __slots__ = ("_answers", "_paths", "answers")

    def __init__(self) -> None:
        self._answers: dict[tuple[str, enum.Enum, enum.Enum, bool | None], enum.Enum | None] = {}
        self._paths = {table.name: _paths(table) for table in (LIFECYCLE, BUDGET, RETRY)}
        self.answers = 0

    def new(self, table: MachineTable[Any, Any]) -> ModelInstance:
        return _MemoInstance(table, self)

    def answer(
        self, table: MachineTable[Any, Any], state: enum.Enum, event: enum.Enum, guard: bool | None
    ) -> enum.Enum | None:
        key = (table.name, state, event, guard)
        try:
            return self._answers[key]
        except KeyError:
            pass
        model = _MODEL_CLASSES[table.name]()
        for step, value in self._paths[table.name][state]:
            if not _send(model, table, step, value):
                raise Disagreement(f"{table.name} model refused its own path to {state.name}")
        if _model_state(model) is not state:
            raise Disagreement(f"{table.name} model's path does not lead to {state.name}")
        after = _model_state(model) if _send(model, table, event, guard) else None
        self.answers += 1
        self._answers[key] = after
        return after
