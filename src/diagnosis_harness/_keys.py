"""Tool invocation keys: ``{prefix}:{run_id}:{tool_call_id}``, built only from safe segments.

Theory of operation: the key is the caller's exact IDs joined by ``:``. The factory validates each
segment and either returns that join or raises; it never generates, normalises, escapes or
truncates an ID, so the key for a framework-supplied Tool Call ID is always that ID, verbatim.

Why the rules exist: keys end up in stores such as Redis, where ``:`` is the namespace separator
and ``*``, ``?``, ``[`` and ``]`` are glob characters in ``SCAN MATCH`` / ``KEYS`` patterns. A
segment holding a separator could collide with another run's key or step into its namespace; a
glob could make a cleanup pattern match other runs' keys; whitespace, control and non-ASCII
characters break logs, shells and byte-length limits. The allowed set is therefore a closed
ASCII allow-list, ``[A-Za-z0-9_.-]``, and every segment is bounded in length so a key is too.
"""

from __future__ import annotations

from typing import Final, final

from ._errors import UnsafeKeySegment

__all__ = ["MAX_SEGMENT_LENGTH", "ToolCallKeyFactory", "safe_segment"]

MAX_SEGMENT_LENGTH: Final = 128
"""The longest segment (prefix, run ID or Tool Call ID) accepted, in characters."""

_SEPARATOR: Final = ":"
_ALLOWED_DESCRIPTION: Final = (
    f"1 to {MAX_SEGMENT_LENGTH} characters from [A-Za-z0-9_.-] "
    "(ASCII letters, digits, '_', '.', '-')"
)
# The allow-list spelled out, character by character: ``str.isalnum`` (or a regex's ``\w``) would
# accept non-ASCII letters and digits such as '٣' or 'é', which it must not.
_SAFE_CHARACTERS: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
)
# How much of an offending value an error message shows; a huge value must not flood the logs.
_SHOWN_CHARACTERS: Final = 40


def _shown(value: str) -> str:
    """The repr of ``value`` for an error message, truncated when it is long."""
    if len(value) <= _SHOWN_CHARACTERS:
        return repr(value)
    return f"{value[:_SHOWN_CHARACTERS]!r}... ({len(value)} characters)"


def safe_segment(name: str, value: object) -> str:
    """Return ``value`` unchanged if it is a safe segment, else raise naming the argument ``name``.

    Raises ``TypeError`` when ``value`` is not exactly a ``str`` and :class:`UnsafeKeySegment`
    when it is blank, whitespace-only, longer than :data:`MAX_SEGMENT_LENGTH` or holds a character
    outside ``[A-Za-z0-9_.-]``.
    """
    # Exactly ``str``: a subclass can override ``__format__``/``__str__`` and so make the key differ
    # from the value that was validated.
    if type(value) is not str:
        raise TypeError(
            f"{name} must be a str, got {type(value).__name__} {value!r:.{_SHOWN_CHARACTERS}}"
        )
    if not value or value.isspace():
        problem = "is empty" if not value else "is whitespace-only"
        raise UnsafeKeySegment(
            f"{name} {problem} ({_shown(value)}); it must be {_ALLOWED_DESCRIPTION}"
        )
    if len(value) > MAX_SEGMENT_LENGTH:
        raise UnsafeKeySegment(
            f"{name} is {len(value)} characters long ({_shown(value)}); "
            f"it must be {_ALLOWED_DESCRIPTION}"
        )
    if not _SAFE_CHARACTERS.issuperset(value):
        index, bad = next((i, c) for i, c in enumerate(value) if c not in _SAFE_CHARACTERS)
        raise UnsafeKeySegment(
            f"{name} holds the unsafe character {bad!r} at index {index} ({_shown(value)}); "
            f"it must be {_ALLOWED_DESCRIPTION}"
        )
    return value


@final
class ToolCallKeyFactory:
    """Builds ``{prefix}:{run_id}:{tool_call_id}`` from exactly the given, validated IDs.

    The prefix is validated once, at construction; ``run_id`` and ``tool_call_id`` on every call.
    A bad segment raises :class:`UnsafeKeySegment` (a ``ValueError``) naming the argument, and a
    non-``str`` one ``TypeError``; no key is produced in either case. The factory holds no state
    beyond its prefix and does not touch any store.
    """

    __slots__ = ("_prefix",)

    def __init__(self, prefix: str) -> None:
        self._prefix: Final = safe_segment("prefix", prefix)  # a safe segment, never rebound

    @property
    def prefix(self) -> str:
        """The validated prefix every key starts with."""
        return self._prefix

    def key(self, run_id: str, tool_call_id: str) -> str:
        """Return ``f"{prefix}:{run_id}:{tool_call_id}"`` with the IDs exactly as given."""
        run_id = safe_segment("run_id", run_id)
        tool_call_id = safe_segment("tool_call_id", tool_call_id)
        return _SEPARATOR.join((self._prefix, run_id, tool_call_id))

    def __repr__(self) -> str:
        return f"ToolCallKeyFactory(prefix={self._prefix!r})"
