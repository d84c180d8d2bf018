"""The server-side scripts: one Redis Function per operation, each one atomic step on a run.

Theory of operation. The library loaded into Redis (``FUNCTION LOAD``, Redis 7) holds one
function per operation, whose body is ``lua/<operation>.lua``, after two shared parts: a prelude
rendered here -- the rows of the budget and lifecycle machines (``model/budget.toml``,
``model/lifecycle.toml``), the signal each ending sends
(:data:`~diagnosis_harness._endings.ENDINGS`) and the one a cascade sends (``PARENT_ENDED``), the
boundary at which each limit is reached
(:data:`~diagnosis_harness._endings.LIMIT_BOUNDARY`), the wording of every reason
(:data:`~diagnosis_harness._endings.REASON_TEXTS`) and the fields of every answer
(:mod:`._protocol`) -- and ``lua/common.lua``, the steps every operation shares. A library's top
level runs once, when it is loaded, so a call runs its operation's steps and nothing else. The
library's name and its functions' names carry a digest of the text, so versions of the library
side by side on one server never mix.

No state name, transition, reason text or answer's field order is written in Lua by hand: a
function words a reason with ``text(name, values)``, answers with ``answer(kind, fields)``, and
steps a machine with ``take(machine, state, event, guard)``, which reads the rendered rows the
way :meth:`~diagnosis_harness._machine.MachineTable.take` reads the table (a terminal state
absorbs the event, an event with no row is an error). ``tests/redis_store/test_scripts.py`` runs
``take`` on the server for every (state, event, guard) and compares it with the table;
``tests/redis_store/test_protocol.py`` checks the answers and the texts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Final, final

from .._endings import ENDINGS, LIMIT_BOUNDARY, REASON_TEXTS, CancellationReason
from .._generated.tables import BUDGET, LIFECYCLE, LifecycleEvent
from . import _protocol

if TYPE_CHECKING:
    import enum

    from .._machine import MachineTable

__all__ = ["OPERATIONS", "TAKE_PROBE", "Library", "library", "prelude", "script_text"]

OPERATIONS: Final = tuple(_protocol.ANSWERS)
"""Every operation that has its own script: each function whose answers :mod:`._protocol` names."""

_TAKE = """
local function take(machine, state, event, guard)
  local by_state = machine.rows[state]
  local by_event = by_state and by_state[event]
  local target = by_event and by_event[guard]
  if target then return target end
  if machine.terminal[state] then return nil end
  error(machine.name .. ': event ' .. tostring(event) .. ' is not allowed in state ' ..
    tostring(state) .. ' with guard ' .. tostring(guard))
end
"""

# `text(name, values)`: the reason text `name` with each {field} filled from `values`. A number
# is written as an integer, as Python writes the counts (Lua's own conversion would write 1e+15).
_TEXT = """
local function text(name, values)
  return (string.gsub(TEXT[name], '{([%w_]+)}', function(field)
    local value = values[field]
    if value == nil then error('the ' .. name .. ' text needs ' .. field) end
    if type(value) == 'number' then return string.format('%d', value) end
    return value
  end))
end
"""

TAKE_PROBE: Final = """
local machine = ({budget = BUDGET, lifecycle = LIFECYCLE})[ARGV[1]]
return take(machine, ARGV[2], ARGV[3], ARGV[4]) or false
"""
"""A script that returns ``take(machine, state, event, guard)`` (nil as false): for the tests."""


def _lua_string(value: str) -> str:
    if not value.replace("_", "").isalnum() or not value.isascii():
        raise ValueError(f"not a table name: {value!r}")  # names only; never needs escaping
    return f"'{value}'"


def _lua_text(value: str) -> str:
    """A Lua string literal of ``value``: printable ASCII with no quote or backslash to escape."""
    if not value.isascii() or not value.isprintable() or "'" in value or "\\" in value:
        raise ValueError(f"not a reason text the prelude writes as it is: {value!r}")
    return f"'{value}'"


def _machine(table: MachineTable[enum.Enum, enum.Enum], variable: str) -> str:
    """``local VARIABLE = {...}``: the table's rows as state -> event -> guard -> target."""
    rows: dict[str, dict[str, list[str]]] = {}
    for row in table.rows:
        guard = "none" if row.guard is None else ("true" if row.expect else "false")
        by_event = rows.setdefault(row.source.value, {})
        by_event.setdefault(row.event.value, []).append(
            f"[{_lua_string(guard)}] = {_lua_string(row.target.value)}"
        )
    states = []
    for state, events in rows.items():
        inner = ", ".join(
            f"[{_lua_string(event)}] = {{{', '.join(targets)}}}"
            for event, targets in events.items()
        )
        states.append(f"  [{_lua_string(state)}] = {{{inner}}},")
    terminal = ", ".join(
        f"[{_lua_string(s.value)}] = true" for s in sorted(table.terminal, key=str)
    )
    return "\n".join(
        [
            f"local {variable} = {{name = {_lua_string(table.name)}, "
            f"initial = {_lua_string(table.initial.value)},",
            f"  terminal = {{{terminal}}},",
            " rows = {",
            *states,
            "}}",
        ]
    )


def prelude() -> str:
    """The machines, the endings' signals, the reason texts and the answers' fields."""
    signals = ", ".join(
        f"[{_lua_string(ending.event.value)}] = {_lua_string(ending.signal.value)}"
        for ending in ENDINGS.values()
        if ending.signal is not None
    )
    texts = ", ".join(f"{t.name} = {_lua_text(t.text)}" for t in REASON_TEXTS)
    boundaries = ", ".join(f"{d.value} = '{b.name}'" for d, b in LIMIT_BOUNDARY.items())
    # The cascade: a descendant of a run that ended is CANCELLED, signalled PARENT_ENDED.
    cascade = (
        f"local CASCADE = {{event = {_lua_string(LifecycleEvent.CANCEL.value)}, "
        f"signal = {_lua_string(CancellationReason.PARENT_ENDED.value)}}}"
    )
    return "\n".join(
        [
            "-- Rendered by diagnosis_harness.redis._scripts from the generated tables, "
            "_endings.py and _protocol.py.",
            _machine(BUDGET, "BUDGET"),  # type: ignore[arg-type]  # enum-typed rows, read only
            _machine(LIFECYCLE, "LIFECYCLE"),  # type: ignore[arg-type]  # as above
            f"local SIGNAL = {{{signals}}}",
            f"local LIMIT_BOUNDARY = {{{boundaries}}}",
            cascade,
            _TAKE,
            f"local TEXT = {{{texts}}}",
            _TEXT,
            _protocol.lua(),
        ]
    )


def _lua(name: str) -> str:
    return (
        resources.files(__package__)
        .joinpath("lua")
        .joinpath(f"{name}.lua")
        .read_text(encoding="utf-8")
    )


def script_text(operation: str) -> str:
    """The whole script of ``operation``: the prelude, the shared steps, its own steps."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}: one of {', '.join(OPERATIONS)}")
    return "\n".join([prelude(), _lua("common"), _lua(operation)])


@final
@dataclass(frozen=True, slots=True)
class Library:
    """The Redis Function library: its text and the function of each operation."""

    name: str
    text: str
    functions: dict[str, str]  # operation -> function name


@cache
def library() -> Library:
    """The library of every operation's function, named by a digest of its text."""
    bodies = {operation: _lua(operation) for operation in OPERATIONS}
    shared = "\n".join([prelude(), _lua("common")])
    digest = hashlib.sha256("\n".join([shared, *bodies.values()]).encode()).hexdigest()[:16]
    name = f"diagnosis_harness_{digest}"
    functions = {operation: f"{name}_{operation}" for operation in OPERATIONS}
    parts = [f"#!lua name={name}", shared]
    for operation, body in bodies.items():
        parts += [
            f"redis.register_function('{functions[operation]}', function(KEYS, ARGV)",
            "begin(KEYS, ARGV)",
            body,
            "end)",
        ]
    return Library(name=name, text="\n".join(parts), functions=functions)
