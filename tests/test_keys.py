"""ToolCallKeyFactory: exact keys from safe segments, typed refusals for everything else."""

from __future__ import annotations

import string
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness._errors import UnsafeKeySegment
from diagnosis_harness._keys import MAX_SEGMENT_LENGTH, ToolCallKeyFactory, safe_segment

SEGMENTS = ("prefix", "run_id", "tool_call_id")
ALLOWED = frozenset(string.ascii_letters + string.digits + "_.-")

safe_segments = st.text(alphabet=sorted(ALLOWED), min_size=1, max_size=MAX_SEGMENT_LENGTH)
unsafe_characters = st.characters(codec="utf-8").filter(
    lambda c: c not in ALLOWED
) | st.sampled_from(
    [":", " ", "\t", "\n", "\x00", "\x7f", "*", "?", "[", "]", "/", "\u00e9", "\u0663", "\uff11"]
)
blank_segments = st.text(alphabet=" \t\n\r\x0b\x0c\u00a0\u2003\u3000", max_size=MAX_SEGMENT_LENGTH)
too_long_segments = st.text(
    alphabet=sorted(ALLOWED), min_size=MAX_SEGMENT_LENGTH + 1, max_size=3 * MAX_SEGMENT_LENGTH
)


class _SneakyStr(str):
    """A str subclass that would change the key if the factory formatted it."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        return "x:*"

    def __str__(self) -> str:
        return "x:*"


non_strings: st.SearchStrategy[object] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.binary(min_size=1),
    st.lists(st.text(alphabet="ab", min_size=1), max_size=2),
    st.just(_SneakyStr("abc")),
)


@st.composite
def unsafe_segments(draw: st.DrawFn) -> str:
    """A segment of at most the length limit holding at least one character outside the set."""
    bad = draw(unsafe_characters)
    room = MAX_SEGMENT_LENGTH - 1
    head = draw(st.text(alphabet=sorted(ALLOWED), max_size=room // 2))
    tail = draw(st.text(alphabet=sorted(ALLOWED), max_size=room - len(head)))
    return head + bad + tail


def _build(prefix: object, run_id: object, tool_call_id: object) -> str:
    """Call the factory with possibly ill-typed arguments, as untyped callers would."""
    untyped: Any = ToolCallKeyFactory
    return untyped(prefix).key(run_id, tool_call_id)  # type: ignore[no-any-return]


def _with(argument: str, value: object) -> tuple[object, object, object]:
    """Safe arguments for the factory, with ``argument`` replaced by ``value``."""
    arguments: dict[str, object] = {"prefix": "tool", "run_id": "run-1", "tool_call_id": "call_1"}
    arguments[argument] = value
    return arguments["prefix"], arguments["run_id"], arguments["tool_call_id"]


@given(prefix=safe_segments, run_id=safe_segments, tool_call_id=safe_segments)
def test_safe_segments_round_trip_exactly(prefix: str, run_id: str, tool_call_id: str) -> None:
    key = ToolCallKeyFactory(prefix).key(run_id, tool_call_id)

    assert key == prefix + ":" + run_id + ":" + tool_call_id
    assert key.split(":") == [prefix, run_id, tool_call_id]


@given(argument=st.sampled_from(SEGMENTS), value=unsafe_segments())
def test_a_character_outside_the_set_is_refused(argument: str, value: str) -> None:
    with pytest.raises(UnsafeKeySegment, match=f"^{argument} ") as caught:
        _build(*_with(argument, value))
    message = str(caught.value)
    assert "[A-Za-z0-9_.-]" in message
    assert value.isspace() or "unsafe character" in message


@given(argument=st.sampled_from(SEGMENTS), value=blank_segments)
def test_a_blank_segment_is_refused(argument: str, value: str) -> None:
    with pytest.raises(UnsafeKeySegment, match=f"^{argument} (is empty|is whitespace-only)"):
        _build(*_with(argument, value))


@given(argument=st.sampled_from(SEGMENTS), value=too_long_segments)
def test_a_too_long_segment_is_refused(argument: str, value: str) -> None:
    with pytest.raises(UnsafeKeySegment, match=f"^{argument} is {len(value)} characters long"):
        _build(*_with(argument, value))


@given(argument=st.sampled_from(SEGMENTS), value=non_strings)
def test_a_non_string_segment_is_a_type_error(argument: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"^{argument} must be a str") as caught:
        _build(*_with(argument, value))
    assert type(caught.value) is TypeError


@pytest.mark.parametrize("argument", SEGMENTS)
def test_the_length_limit_is_inclusive(argument: str) -> None:
    at_limit = "a" * MAX_SEGMENT_LENGTH
    assert MAX_SEGMENT_LENGTH == 128

    assert _build(*_with(argument, at_limit)).split(":") == list(_with(argument, at_limit))
    with pytest.raises(UnsafeKeySegment, match=f"^{argument} is 129 characters long"):
        _build(*_with(argument, at_limit + "a"))


def test_an_unsafe_value_is_shown_with_repr_and_truncated() -> None:
    factory = ToolCallKeyFactory("tool")
    with pytest.raises(UnsafeKeySegment, match=r"'\\n'") as newline:
        factory.key("run\n", "ok")
    assert "'run\\n'" in str(newline.value)

    huge = "x" * 10_000 + ":"
    with pytest.raises(UnsafeKeySegment) as caught:
        factory.key("ok", huge)
    message = str(caught.value)
    assert message.startswith("tool_call_id ")
    assert "10001 characters" in message
    assert len(message) < 400


def test_the_prefix_is_read_only() -> None:
    factory = ToolCallKeyFactory("tool")
    untyped: Any = factory
    with pytest.raises(AttributeError):
        untyped.prefix = "other"
    with pytest.raises(AttributeError):
        untyped.extra = 1
    assert factory.prefix == "tool"
    assert repr(factory) == "ToolCallKeyFactory(prefix='tool')"


def _accepted(character: str) -> bool:
    try:
        safe_segment("run_id", character)
    except UnsafeKeySegment:
        return False
    return True


def test_no_letter_or_digit_beyond_the_ascii_allow_list_is_accepted() -> None:
    """Every ASCII character and every Unicode letter or digit (what ``str.isalnum`` or a regex's
    ``\\w`` would let in: 'é', '٣', a fullwidth '1'), as a one-character segment: exactly the 65 of
    ``[A-Za-z0-9_.-]`` are accepted."""
    candidates = [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if code < 0x80 or chr(code).isalnum() or chr(code).isdecimal()
    ]
    assert len(candidates) > 100_000
    accepted = {character for character in candidates if _accepted(character)}
    assert accepted == ALLOWED
    assert len(ALLOWED) == 65
