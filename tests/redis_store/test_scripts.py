"""The scripts step the machines the tables in ``model/`` describe, and nothing else.

The Lua prelude is rendered from the generated tables; these tests run its ``take`` on a real
server for every (state, event, guard value) and compare it with ``MachineTable.take``, and check
that the scripts name no state and no event the tables do not have. A script and a table that
disagree fail here.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING, Any

import pytest
import redis

from diagnosis_harness import IllegalTransition
from diagnosis_harness._generated.tables import BUDGET, LIFECYCLE
from diagnosis_harness.redis._scripts import OPERATIONS, TAKE_PROBE, prelude, script_text

if TYPE_CHECKING:
    import enum

    from diagnosis_harness._machine import MachineTable

TABLES: dict[str, MachineTable[Any, Any]] = {"budget": BUDGET, "lifecycle": LIFECYCLE}
_TAKE_CALL = re.compile(r"take\((BUDGET|LIFECYCLE), [^,]+, '([a-z_]+)', '([a-z]+)'\)")
_END_CALL = re.compile(r"end_run\('([a-z_]+)'")


def _guards(table: MachineTable[Any, Any], state: enum.Enum, event: enum.Enum) -> list[str]:
    return ["none"] if table.guard_of(state, event) is None else ["true", "false", "none"]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_take_on_the_server_is_the_tables_take(client: redis.Redis, name: str) -> None:
    table = TABLES[name]
    probe = client.register_script(f"{prelude()}\n{TAKE_PROBE}")
    compared = 0
    for state in table.states:
        for event in table.events:
            for guard in _guards(table, state, event):
                value = {"true": True, "false": False, "none": None}[guard]
                try:
                    row = table.take(state, event, value)
                    expected: str | None = None if row is None else row.target.value
                except IllegalTransition:
                    with pytest.raises(redis.ResponseError, match="is not allowed"):
                        probe(args=[name, state.value, event.value, guard])
                    compared += 1
                    continue
                got = probe(args=[name, state.value, event.value, guard])
                assert (None if got is None else got.decode()) == expected, (state, event, guard)
                compared += 1
    assert compared >= len(table.rows)


def test_the_scripts_name_only_events_of_the_tables() -> None:
    steps = 0
    for operation in OPERATIONS:
        text = script_text(operation).split("local function take", 1)[1]  # past the prelude
        for machine, event, guard in _TAKE_CALL.findall(text):
            table = TABLES[machine.lower()]
            assert event in {e.value for e in table.events}, (operation, event)
            assert guard in {"true", "false", "none"}
            steps += 1
        for event in _END_CALL.findall(text):
            assert event in {e.value for e in LIFECYCLE.events}, (operation, event)
    assert steps >= 3


def test_no_script_writes_a_state_name_by_hand() -> None:
    lua = resources.files("diagnosis_harness.redis").joinpath("lua")
    names = {s.value for s in (*BUDGET.states, *LIFECYCLE.states)}
    for operation in (*OPERATIONS, "common"):
        text = lua.joinpath(f"{operation}.lua").read_text(encoding="utf-8")
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        for literal in re.findall(r"'([A-Z_]+)'", code):
            assert literal not in names, (operation, literal)
