"""Read one spec table from ``model/*.toml`` and refuse every table the generator cannot trust.

A table is closed-world data: states (exactly one initial, terminal ones marked), events, named
boolean guards, and transition rows ``(source, event) -> target`` with an optional guard (``g`` or
``not g``) and the spec requirement the row serves. Every refusal names the file, the row and what
to do, because the person reading it is editing that file.
"""

from __future__ import annotations

import re
import sys
from collections import deque
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

__all__ = [
    "GuardSpec",
    "MachineSpec",
    "RowSpec",
    "StateSpec",
    "TableError",
    "load_machine",
    "requirement_names",
]

_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_STATE_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_EVENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_REQUIREMENT_HEADING = re.compile(r"^### Requirement: (.+?)\s*$", re.MULTILINE)


class TableError(ValueError):
    """A spec table the generator refuses; the message names the file, the row and the fix."""

    def __init__(self, path: Path | str, where: str, problem: str, fix: str) -> None:
        self.path = str(path)
        self.where = where
        self.problem = problem
        self.fix = fix
        super().__init__(f"{self.path}: {where}: {problem} -- {fix}")


@dataclass(frozen=True, slots=True, kw_only=True)
class StateSpec:
    name: str
    doc: str
    initial: bool
    terminal: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardSpec:
    name: str
    doc: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RowSpec:
    index: int  # 1-based position among the file's [[transitions]], as a reader counts them
    source: str
    event: str
    target: str
    guard: str | None
    expect: bool  # the row applies when `guard` evaluates to this value
    requirement: str

    @property
    def guard_text(self) -> str:
        if self.guard is None:
            return ""
        return self.guard if self.expect else f"not {self.guard}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineSpec:
    path: Path
    name: str
    class_name: str
    state_enum: str
    event_enum: str
    doc: str
    states: tuple[StateSpec, ...]
    events: tuple[tuple[str, str], ...]  # (name, doc), in file order
    guards: tuple[GuardSpec, ...]
    rows: tuple[RowSpec, ...]

    @property
    def initial(self) -> StateSpec:
        return next(s for s in self.states if s.initial)


def requirement_names(spec_markdown: str) -> frozenset[str]:
    """The ``### Requirement:`` names of an OpenSpec markdown spec."""
    return frozenset(m.group(1) for m in _REQUIREMENT_HEADING.finditer(spec_markdown))


def load_machine(path: Path, *, requirements: Iterable[str] | None = None) -> MachineSpec:
    """Parse and validate one table; ``requirements`` (when given) are the names rows may cite."""
    # Imported here, not at the top: only the generator reads TOML, and on Python 3.10 the parser
    # is the tomli package, which an installation that never generates need not have.
    if sys.version_info >= (3, 11):
        import tomllib  # noqa: PLC0415 - lazy, like tomli below
    else:  # pragma: no cover - exercised by the py310 tox env
        try:
            import tomli as tomllib  # noqa: PLC0415 - lazy: Python 3.10 needs the package
        except ImportError as exc:
            raise ImportError(
                "diagnosis_harness.codegen reads model/*.toml with tomli on Python 3.10: "
                "pip install 'tomli>=2.0'"
            ) from exc
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TableError(path, "file", f"not valid TOML ({exc})", "fix the TOML syntax") from exc
    known_requirements = None if requirements is None else frozenset(requirements)
    return _validate(path, raw, known_requirements)


_TOML_KINDS = {
    bool: "a boolean",
    int: "an integer",
    float: "a float",
    str: "a string",
    list: "an array",
}


def _kind(value: object) -> str:
    """What TOML made of ``value``, for a message: "an integer", "an array", "a date"..."""
    return _TOML_KINDS.get(type(value), f"a {type(value).__name__}")


def _entries(path: Path, raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The section ``[key]``, empty when absent; any value but a table is refused, named.

    TOML lets ``key = 1`` stand where ``[key.<name>]`` tables belong; the loader must then say
    so rather than fail on the value later.
    """
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TableError(
            path,
            f"[{key}]",
            f"must be a table of [{key}.<name>] tables, not {_kind(value)}",
            f"declare each entry as [{key}.<name>] with a doc, and no `{key} = ...` value",
        )
    return value


def _table(path: Path, raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The section ``[key]``, which must hold at least one ``[key.<name>]``."""
    value = _entries(path, raw, key)
    if not value:
        raise TableError(
            path, f"[{key}]", "missing or empty", f"declare at least one [{key}.<name>]"
        )
    return value


def _text(path: Path, where: str, entry: Mapping[str, Any], key: str, *, required: bool) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise TableError(path, where, f"`{key}` must be a non-empty string", f'set {key} = "..."')
    return value


def _flag(path: Path, where: str, entry: Mapping[str, Any], key: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise TableError(path, where, f"`{key}` must be true or false", f"write {key} = true")
    return value


def _validate(
    path: Path, raw: Mapping[str, Any], requirements: frozenset[str] | None
) -> MachineSpec:
    machine, header = _machine(path, raw)
    states = _states(path, raw)
    events = _events(path, raw)
    guards = _guards(path, raw)
    rows = _rows(
        path, raw=raw, states=states, events=events, guards=guards, requirements=requirements
    )
    _check_structure(path, states, events, guards, rows)
    return MachineSpec(
        path=path,
        doc=_text(path, "[machine]", machine, "doc", required=True),
        states=tuple(states),
        events=tuple(events),
        guards=tuple(guards),
        rows=tuple(rows),
        **header,
    )


def _machine(path: Path, raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
    """The ``[machine]`` table and its four identifiers (name, class and the two enums)."""
    machine = raw.get("machine")
    if machine is not None and not isinstance(machine, dict):
        raise TableError(
            path,
            "[machine]",
            f"must be a table, not {_kind(machine)}",
            "write [machine] on its own line, with name and class_name under it",
        )
    if not isinstance(machine, dict):
        raise TableError(
            path, "[machine]", "missing", "add a [machine] table with name and class_name"
        )
    header = {
        key: _text(path, "[machine]", machine, key, required=True)
        for key in ("name", "class_name", "state_enum", "event_enum")
    }
    for key, value in header.items():
        if not _IDENTIFIER.match(value):
            raise TableError(
                path, "[machine]", f"{key} {value!r} is not an identifier", "use letters, digits, _"
            )
    return machine, header


def _states(path: Path, raw: Mapping[str, Any]) -> list[StateSpec]:
    """The ``[states.<NAME>]`` tables, exactly one of them initial."""
    states = [_state(path, name, entry) for name, entry in _table(path, raw, "states").items()]
    initials = [s.name for s in states if s.initial]
    if len(initials) != 1:
        found = ", ".join(initials) if initials else "none"
        raise TableError(
            path,
            "[states]",
            f"exactly one initial state is required (found: {found})",
            "mark exactly one state with initial = true",
        )
    return states


def _state(path: Path, name: str, entry: object) -> StateSpec:
    where = f"[states.{name}]"
    if not _STATE_NAME.match(name):
        raise TableError(
            path, where, "state names are UPPER_SNAKE_CASE", f"rename it {name.upper()}"
        )
    if not isinstance(entry, dict):
        raise TableError(path, where, "must be a table", f"write [states.{name}] on its own line")
    state = StateSpec(
        name=name,
        doc=_text(path, where, entry, "doc", required=True),
        initial=_flag(path, where, entry, "initial"),
        terminal=_flag(path, where, entry, "terminal"),
    )
    if state.initial and state.terminal:
        raise TableError(
            path, where, "a state cannot be both initial and terminal", "drop one flag"
        )
    return state


def _events(path: Path, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``[events.<name>]`` tables, as (name, doc)."""
    events: list[tuple[str, str]] = []
    for name, entry in _table(path, raw, "events").items():
        where = f"[events.{name}]"
        if not _EVENT_NAME.match(name):
            raise TableError(
                path, where, "event names are lower_snake_case", f"rename it {name.lower()}"
            )
        if not isinstance(entry, dict):
            raise TableError(
                path, where, "must be a table", f"write [events.{name}] on its own line"
            )
        events.append((name, _text(path, where, entry, "doc", required=True)))
    return events


def _guards(path: Path, raw: Mapping[str, Any]) -> list[GuardSpec]:
    """The ``[guards.<name>]`` tables; a table may have none."""
    guards: list[GuardSpec] = []
    for name, entry in _entries(path, raw, "guards").items():
        where = f"[guards.{name}]"
        if not _EVENT_NAME.match(name) or not isinstance(entry, dict):
            raise TableError(
                path,
                where,
                "guards are lower_snake_case tables",
                "write [guards.<name>] with a doc",
            )
        guards.append(GuardSpec(name=name, doc=_text(path, where, entry, "doc", required=True)))
    return guards


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class _Names:
    """What a row may name: the declared states, events and guards, and the spec's
    requirements (``None``: any requirement is accepted)."""

    states: frozenset[str]
    events: frozenset[str]
    guards: frozenset[str]
    requirements: frozenset[str] | None


def _rows(
    path: Path,
    *,
    raw: Mapping[str, Any],
    states: list[StateSpec],
    events: list[tuple[str, str]],
    guards: list[GuardSpec],
    requirements: frozenset[str] | None,
) -> list[RowSpec]:
    names = _Names(
        states=frozenset(s.name for s in states),
        events=frozenset(name for name, _ in events),
        guards=frozenset(g.name for g in guards),
        requirements=requirements,
    )
    entries = raw.get("transitions")
    if not isinstance(entries, list) or not entries:
        raise TableError(path, "[[transitions]]", "no transition rows", "add [[transitions]] rows")
    return [_row(path, index, entry, names) for index, entry in enumerate(entries, start=1)]


def _row(path: Path, index: int, entry: object, names: _Names) -> RowSpec:
    """The ``index``-th ``[[transitions]]`` row, each name in it declared."""
    where = f"transitions[{index}]"
    if not isinstance(entry, dict):
        raise TableError(path, where, "must be a table", "write each row as [[transitions]]")
    unknown_keys = set(entry) - {"source", "event", "target", "guard", "requirement"}
    if unknown_keys:
        raise TableError(
            path,
            where,
            f"unknown key(s) {sorted(unknown_keys)}",
            "use only source, event, target, guard, requirement",
        )
    source = _text(path, where, entry, "source", required=True)
    event = _text(path, where, entry, "event", required=True)
    target = _text(path, where, entry, "target", required=True)
    where = f"transitions[{index}] ({source}, {event})"
    for role, name in (("source", source), ("target", target)):
        if name not in names.states:
            raise TableError(
                path,
                where,
                f"unknown {role} state {name!r}",
                f"use one of {sorted(names.states)} or declare [states.{name}]",
            )
    if event not in names.events:
        raise TableError(
            path,
            where,
            f"unknown event {event!r}",
            f"use one of {sorted(names.events)} or declare [events.{event}]",
        )
    guard, expect = _row_guard(path, where, entry.get("guard"), names.guards)
    return RowSpec(
        index=index,
        source=source,
        event=event,
        target=target,
        guard=guard,
        expect=expect,
        requirement=_row_requirement(path, where, entry.get("requirement"), names.requirements),
    )


def _row_guard(
    path: Path, where: str, guard_text: object, guard_names: frozenset[str]
) -> tuple[str | None, bool]:
    """A row's ``guard`` (``g`` or ``not g``) as (guard, the value it expects)."""
    if guard_text is None:
        return None, True
    if not isinstance(guard_text, str):
        raise TableError(path, where, "guard must be a string", 'write guard = "g" or "not g"')
    words = guard_text.split()
    if len(words) == 2 and words[0] == "not":
        guard, expect = words[1], False
    elif len(words) == 1:
        guard, expect = words[0], True
    else:
        raise TableError(
            path, where, f"guard {guard_text!r} is not `g` or `not g`", "name one guard"
        )
    if guard not in guard_names:
        raise TableError(
            path,
            where,
            f"unknown guard {guard!r}",
            f"use one of {sorted(guard_names) or 'no guards'} or declare [guards.{guard}]",
        )
    return guard, expect


def _row_requirement(
    path: Path, where: str, requirement: object, requirements: frozenset[str] | None
) -> str:
    """A row's ``requirement``: present, and a requirement of the spec when those are known."""
    if not isinstance(requirement, str) or not requirement.strip():
        raise TableError(
            path,
            where,
            "missing requirement reference",
            'add requirement = "<the spec requirement this row serves>"',
        )
    if requirements is not None and requirement not in requirements:
        raise TableError(
            path,
            where,
            f"requirement {requirement!r} is not in the spec",
            "cite a `### Requirement:` name of specs/*/spec.md exactly",
        )
    return requirement


def _disjoint(a: RowSpec, b: RowSpec) -> bool:
    """Two rows for one (state, event) are disjoint only as `g` and `not g` of one named guard."""
    return a.guard is not None and a.guard == b.guard and a.expect != b.expect


def _check_structure(
    path: Path,
    states: list[StateSpec],
    events: list[tuple[str, str]],
    guards: list[GuardSpec],
    rows: list[RowSpec],
) -> None:
    """The checks of the table as a whole, in the order a reader fixes them: no exit from a
    terminal state, no overlapping rows, every state reachable and left, every name used."""
    _check_rows_apart(path, states, rows)
    _check_reachable(path, states, rows)
    _check_used(path, events, guards, rows)


def _check_rows_apart(path: Path, states: list[StateSpec], rows: list[RowSpec]) -> None:
    """No row leaves a terminal state; the rows of one (state, event) have disjoint guards."""
    terminal = {s.name for s in states if s.terminal}
    by_key: dict[tuple[str, str], list[RowSpec]] = {}
    for row in rows:
        where = f"transitions[{row.index}] ({row.source}, {row.event})"
        if row.source in terminal:
            raise TableError(
                path,
                where,
                f"an exit from terminal state {row.source}",
                "terminal states absorb every event; delete the row or unmark the state",
            )
        by_key.setdefault((row.source, row.event), []).append(row)
    for (source, event), group in by_key.items():
        for a, b in combinations(group, 2):
            if not _disjoint(a, b):
                raise TableError(
                    path,
                    f"transitions[{a.index}] and transitions[{b.index}] ({source}, {event})",
                    "two rows for one (state, event) without disjoint guards",
                    'guard one row with "g" and the other with "not g", or merge them',
                )


def _check_reachable(path: Path, states: list[StateSpec], rows: list[RowSpec]) -> None:
    """Every state is reached from the initial one, and every non-terminal one has an exit."""
    adjacency: dict[str, set[str]] = {}
    for row in rows:
        adjacency.setdefault(row.source, set()).add(row.target)
    initial = next(s.name for s in states if s.initial)
    seen = {initial}
    queue = deque([initial])
    while queue:
        for target in sorted(adjacency.get(queue.popleft(), ())):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    for state in states:
        where = f"[states.{state.name}]"
        if state.name not in seen:
            raise TableError(
                path,
                where,
                f"state {state.name} cannot be reached from {initial}",
                "add a row that leads to it, or delete the state",
            )
        if not state.terminal and state.name not in adjacency:
            raise TableError(
                path,
                where,
                f"non-terminal state {state.name} has no exit (a trap)",
                "add a row leaving it, or mark it terminal = true",
            )


def _check_used(
    path: Path, events: list[tuple[str, str]], guards: list[GuardSpec], rows: list[RowSpec]
) -> None:
    """Every declared event and guard is used by a row."""
    used_events = {row.event for row in rows}
    for name, _ in events:
        if name not in used_events:
            raise TableError(
                path, f"[events.{name}]", "no row uses this event", "add a row or delete it"
            )
    used_guards = {row.guard for row in rows}
    for guard in guards:
        if guard.name not in used_guards:
            raise TableError(
                path, f"[guards.{guard.name}]", "no row uses this guard", "add a row or delete it"
            )
