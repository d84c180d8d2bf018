"""What the Redis functions answer, declared once: named here, rendered into the Lua prelude.

Theory of operation. Every function of the library (:mod:`._scripts`) answers a flat list whose
first element is a code. For each function, :data:`ANSWERS` names the codes it may answer and,
for each code, the shape of the answer: one of the NamedTuples below, whose fields are the list's
elements in order. The Lua side never writes an answer as a positional list: it builds one with
``answer(kind, {field = value, ...})``, whose field order the prelude renders from these tuples
(:func:`lua`), or returns ``UNKNOWN`` or ``PASSED``, rendered here too; so the order is written
here alone (``snapshot`` appends its (Tool, count) pairs after its fields). The store decodes
every answer with :func:`decode`, which checks that the function may answer the code and that
the count of fields is the shape's: a library and a decoder that disagree fail with
:class:`ProtocolError`, naming the function, and never read the wrong field.

One answer is nested: ``tree`` answers ``'tree'`` then one entry per run (:class:`TreeRun`), each
ending with a whole :class:`Snapshot` answer, decoded as any other.

The fields of :class:`Status` past its code are the names of the run hash's own fields, so a read
of the hash (:data:`STATUS_FIELDS`, one ``HMGET``) is decoded as a script's status is
(:func:`status_of`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._boundary import Boundary
from .._endings import CancellationReason
from .._generated.tables import BudgetState, RunState
from .._limits import BudgetDimension

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "ANSWERS",
    "STATUS_FIELDS",
    "Answer",
    "Capacity",
    "Created",
    "Held",
    "Passed",
    "ProtocolError",
    "Snapshot",
    "Status",
    "Tree",
    "TreeRun",
    "Unknown",
    "decode",
    "lua",
    "status_of",
]


class ProtocolError(RuntimeError):
    """A function's answer does not have the shape declared for it: the library loaded in the
    server and this decoder disagree (a bug, never a store that does not answer)."""


class Unknown(NamedTuple):
    """``unknown``: no run is stored under the keys (never created, expired, or lost)."""

    code: str


class Passed(NamedTuple):
    """``ok``: the gate passed, or the reservation was granted (by this call, or by the call
    with the same operation id whose answer was lost)."""

    code: str


class Held(NamedTuple):
    """``held``: a partial hold's reservation was granted (by this call, or by the call with the
    same operation id whose answer was lost); ``held`` is the picodollars it holds."""

    code: str
    held: int


class Created(NamedTuple):
    """``ok``: the run is published (by this call or by it sent before); ``exists``: the ID is
    another run's."""

    code: str


class Status(NamedTuple):
    """What a caller learns of the run (``status()`` in ``lua/common.lua``).

    ``code``: ``ok``; ``ended`` (the run has ended); ``ended_now`` (this operation's id recorded
    the ending). ``at`` is the ending's instant on the run's timeline and ``signal`` the first
    cancellation reason: ``None`` while the run is live, set once it has ended. ``boundary``:
    the one that decided the ending, ``None`` for one decided elsewhere (finish, cancel).
    """

    code: str
    state: RunState
    reason: str
    at: int | None
    signal: CancellationReason | None
    exhausted: BudgetDimension | None
    budget: BudgetState
    boundary: Boundary | None


class Snapshot(NamedTuple):
    """``snapshot``: the status (the fields of :class:`Status`, first and in its order), every
    counter, and each Tool's count (the pairs after the counters on the wire). ``cost`` and
    ``cost_held`` are integer picodollars: the settled costs and the holds not settled yet."""

    code: str
    state: RunState
    reason: str
    at: int | None
    signal: CancellationReason | None
    exhausted: BudgetDimension | None
    budget: BudgetState
    boundary: Boundary | None
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    run_bytes: int
    cost: int
    cost_held: int
    per_tool: Mapping[str, int]

    @property
    def status(self) -> Status:
        return Status._make(self[: len(Status._fields)])


class TreeRun(NamedTuple):
    """One run of a :class:`Tree`: its ID, its parent's (``None`` for the root), its stored
    limits (the JSON the store keeps) and its :class:`Snapshot`."""

    run_id: str
    parent: str | None
    limits: str
    snapshot: Snapshot


class Tree(NamedTuple):
    """``tree``: the run read with its ancestors and descendants in one step. ``runs``: the run
    first, then its ancestors nearest first, then its descendants, each after its parent."""

    code: str
    runs: tuple[TreeRun, ...]


class Capacity(NamedTuple):
    """``capacity``: ``ok`` (reserved), ``no`` (refused, or a read), ``limit`` (the stored limit
    is another one); ``limit`` and ``used`` are the stored ones."""

    code: str
    limit: int
    used: int


Answer = Unknown | Passed | Held | Created | Status | Snapshot | Tree | Capacity

_PAIRS: Final = "per_tool"  # a last field made of every (name, count) pair after the others
_KINDS: Final[tuple[type[Answer], ...]] = (
    Unknown,
    Passed,
    Held,
    Created,
    Status,
    Snapshot,
    Capacity,
)

STATUS_FIELDS: Final = Status._fields[1:]
"""The run hash's fields a status reads, in the order of :class:`Status`."""

_ENDED: Final[dict[str, type[Answer]]] = {"ended": Status, "ended_now": Status, "unknown": Unknown}
_GATE: Final[dict[str, type[Answer]]] = {"ok": Passed, **_ENDED}

ANSWERS: Final[Mapping[str, Mapping[str, type[Answer]]]] = MappingProxyType(
    {
        "create": {"ok": Created, "exists": Created},
        "check": _GATE,
        "reserve_model_call": {**_GATE, "held": Held},
        "reserve_tool_call": _GATE,
        "reserve_bytes": _GATE,
        "record_token_usage": {"ok": Status, "ended_now": Status, "unknown": Unknown},
        "settle": {"ok": Status, "ended_now": Status, "unknown": Unknown},
        "finish": _ENDED,
        "cancel": _ENDED,
        "snapshot": {"ok": Snapshot, "unknown": Unknown},
        "tree": {"tree": Tree, "unknown": Unknown},
        "claim": {"ok": Created, "exists": Created},
        "create_child": {"ok": Created, "exists": Created, "ended": Status, "unknown": Unknown},
        "capacity": {"ok": Capacity, "no": Capacity, "limit": Capacity, "unknown": Unknown},
    }
)
"""Each function, in the library's order: the codes it may answer and the shape of each."""


def _str(value: bytes | str | int) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, str) else str(value)


def _optional(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda text: convert(text) if text else None  # '' is how Lua answers "none"


def _member(members_of: type[enum.Enum], *, by_name: bool = False) -> Callable[[str], Any]:
    """The member of ``enum`` a text names: a dict lookup (an enum's own call is far slower)."""
    members = {(m.name if by_name else m.value): m for m in members_of}
    return members.__getitem__  # a text of no member: KeyError, a ProtocolError in _shaped


_CONVERT: Final[Mapping[str, Callable[[str], Any]]] = MappingProxyType(
    {
        "state": _member(RunState),
        "budget": _member(BudgetState),
        "at": _optional(int),
        "signal": _optional(_member(CancellationReason)),
        "exhausted": _optional(_member(BudgetDimension)),
        "boundary": _optional(_member(Boundary, by_name=True)),  # as the refusals name it
        **dict.fromkeys(
            ("limit", "used", "held", *Snapshot._fields[len(Status._fields) : -1]),
            lambda text: int(text or 0),
        ),
    }
)
"""How a field is read off the wire; a field not named here is text."""


def _fields(kind: type[Answer]) -> tuple[str, ...]:
    """The fields of ``kind`` the wire carries in order (the pairs after them not counted)."""
    return tuple(name for name in kind._fields if name != _PAIRS)


# Each shape's wire fields and their readers, worked out once: decode() runs on every answer.
_WIRE: Final = {kind: _fields(kind) for kind in _KINDS}
_READERS: Final = {kind: tuple(_CONVERT.get(name, str) for name in _WIRE[kind]) for kind in _KINDS}

# The answers that are their code alone, made once for each spelling of the code (redis-py
# answers bytes, or str with decode_responses): a grant, the most frequent, is one lookup.
_ALONE: Final[dict[tuple[str, bytes | str], Answer]] = {
    (function, spelled): kind._make((code,))
    for function, shapes in ANSWERS.items()
    for code, kind in shapes.items()
    if len(kind._fields) == 1
    for spelled in (code, code.encode())
}


def decode(function: str, raw: Sequence[Any]) -> Answer:
    """``raw``, the answer of ``function``, as its named tuple; :class:`ProtocolError` if the
    function may not answer its code, or the count of fields is not the code's shape's."""
    if len(raw) == 1:
        alone = _ALONE.get((function, raw[0]))
        if alone is not None:
            return alone
    shapes = ANSWERS[function]
    code = _str(raw[0]) if raw else ""
    kind = shapes.get(code)
    if kind is None:
        raise ProtocolError(
            f"the Redis function {function!r} answered the code {code!r}: it answers "
            f"{', '.join(map(repr, shapes))} only"
        )
    if kind is Tree:
        return _tree(function, raw)
    return _shaped(function, kind, raw)


def _tree(function: str, raw: Sequence[Any]) -> Tree:
    """A ``tree`` answer: each entry is [run ID, parent ID or '', limits JSON, a Snapshot]."""
    runs = []
    for entry in raw[1:]:
        if not isinstance(entry, list) or len(entry) != len(TreeRun._fields):
            raise ProtocolError(
                f"the Redis function {function!r} answered a tree entry {entry!r}; each has "
                f"{len(TreeRun._fields)}: {', '.join(TreeRun._fields)}"
            )
        run_id, parent, limits, snapshot = entry
        shaped = _shaped(function, Snapshot, snapshot)
        assert isinstance(shaped, Snapshot)  # the shape it was given
        runs.append(TreeRun(_str(run_id), _str(parent) or None, _str(limits), shaped))
    return Tree(_str(raw[0]), tuple(runs))


def status_of(values: Sequence[bytes | str | None]) -> Status | Unknown:
    """The run's status from a read of its hash's :data:`STATUS_FIELDS`: :class:`Unknown` if
    there is no run."""
    if values[0] is None:
        return Unknown("unknown")
    raw = ["ok", *("" if value is None else value for value in values)]
    status = _shaped("HMGET", Status, raw)
    assert isinstance(status, Status)  # the shape it was given
    return status


def _shaped(function: str, kind: type[Answer], raw: Sequence[Any]) -> Answer:
    names = _WIRE[kind]
    pairs = _PAIRS in kind._fields
    extra = len(raw) - len(names)
    if extra < 0 or (extra % 2 if pairs else extra):
        raise ProtocolError(
            f"the Redis function {function!r} answered {_str(raw[0])!r} with {len(raw)} "
            f"fields; its {kind.__name__} has {len(names)}: {', '.join(names)}"
            + (", then (name, count) pairs" if pairs else "")
        )
    try:
        values: list[Any] = [
            read(_str(value)) for read, value in zip(_READERS[kind], raw, strict=False)
        ]
    except (KeyError, ValueError) as error:
        raise ProtocolError(
            f"the Redis function {function!r} answered {kind.__name__} {list(raw)!r}: a field "
            f"is not one this library writes ({type(error).__name__}: {error})"
        ) from error
    if pairs:
        rest = raw[len(names) :]
        counts = {_str(rest[i]): int(rest[i + 1]) for i in range(0, extra, 2)}
        values.append(MappingProxyType(counts))
    return kind._make(values)


def _lua_names(names: Sequence[str]) -> str:
    return "{" + ", ".join(f"'{name}'" for name in names) + "}"


def lua() -> str:
    """``ANSWER`` (each shape's fields in order), ``answer(kind, fields)``, and the answers
    ``UNKNOWN`` and ``PASSED``, for the prelude.

    ``answer`` lists a named table's values in the declared order; a missing field is an error
    naming the shape, raised in the server and so in the caller.
    """
    shapes = ", ".join(f"{kind.__name__} = {_lua_names(_fields(kind))}" for kind in _KINDS)
    return "\n".join(
        [
            f"local ANSWER = {{{shapes}}}",
            "-- The answers that are their code alone, made once (a library's top level, run when",
            "-- it is loaded, has no ipairs to call answer() with).",
            f"local UNKNOWN, PASSED = {_lua_names(Unknown('unknown'))}, {_lua_names(Passed('ok'))}",
            "local function answer(kind, fields)",
            "  local list = {}",
            "  for i, name in ipairs(ANSWER[kind]) do",
            "    local value = fields[name]",
            "    if value == nil then error(kind .. ' answer without ' .. name) end",
            "    list[i] = value",
            "  end",
            "  return list",
            "end",
        ]
    )
