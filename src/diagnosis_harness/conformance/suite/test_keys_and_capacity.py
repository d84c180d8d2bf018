"""Requirement: Tool invocation key and Run capacity primitives SHALL be safe and
store-independent."""

from __future__ import annotations

import pytest

from diagnosis_harness import HarnessError, RunCapacityCounter, ToolCallKeyFactory, UnsafeKeySegment
from diagnosis_harness._keys import MAX_SEGMENT_LENGTH

from ._support import PRIMITIVES


@pytest.mark.spec(PRIMITIVES, "Framework Tool Call ID is used in a key")
def test_framework_tool_call_id_is_used_in_a_key() -> None:
    factory = ToolCallKeyFactory("diag.tool")
    framework_id = "call_0aB9-z.Q_"

    key = factory.key("run-2024.06_01", framework_id)

    assert key == "diag.tool:run-2024.06_01:call_0aB9-z.Q_"
    assert key.split(":") == ["diag.tool", "run-2024.06_01", framework_id]
    assert factory.prefix == "diag.tool"
    # The same IDs always give the same key: nothing is generated per call.
    assert factory.key("run-2024.06_01", framework_id) == key


@pytest.mark.spec(PRIMITIVES, "Unsafe key segment is supplied")
def test_unsafe_key_segment_is_supplied() -> None:
    factory = ToolCallKeyFactory("tool")
    refused = {
        "blank": "",
        "whitespace": "   ",
        "too long": "a" * (MAX_SEGMENT_LENGTH + 1),
        "separator": "run:1",
        "glob": "run*",
        "space": "run 1",
        "control": "run\x00",
        "non-ascii digit": "run\u0663",
    }
    for argument in ("run_id", "tool_call_id"):
        for label, value in refused.items():
            run_id, tool_call_id = ("ok", value) if argument == "tool_call_id" else (value, "ok")
            with pytest.raises(UnsafeKeySegment, match=argument) as caught:
                factory.key(run_id, tool_call_id)
            assert isinstance(caught.value, ValueError), label
            assert isinstance(caught.value, HarnessError), label


@pytest.mark.spec(PRIMITIVES, "Run byte limit would be exceeded")
def test_run_byte_limit_would_be_exceeded() -> None:
    counter = RunCapacityCounter(100)
    assert counter.try_reserve(60)
    assert counter.try_reserve(30)

    assert not counter.try_reserve(11)

    assert (counter.used, counter.remaining, counter.limit) == (90, 10, 100)
    assert counter.try_reserve(10)
    assert not counter.try_reserve(1)
    assert (counter.used, counter.remaining) == (100, 0)
