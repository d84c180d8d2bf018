"""Read a spec in OpenSpec's Markdown form (``specs/<capability>/spec.md``) into one model.

Theory of operation. The reader walks the text line by line and fills a draft (:class:`_Draft`:
purpose, requirements with their body lines, scenarios with their steps, each with its 1-based
line number) and notes the *structure* problems (a stray heading, a requirement outside
``Requirements``). A second pass then checks the draft the way
OpenSpec's validator checks a spec (checked against ``openspec validate --strict --json`` 1.13.2,
whose messages are kept verbatim where it has one) plus the structure checks of
``tools/openspec-validate.sh``, and freezes it into a :class:`Spec`.

Names are kept verbatim (trimmed): a test's ``@pytest.mark.spec(requirement, scenario)`` must
name them exactly. IDs are ``<capability>/<requirement-slug>/<scenario-slug>``; a slug is the
lowercased name with every run of non-alphanumerics turned into one ``-``, so an ID changes only
when a name does.

Only OpenSpec's form is read: it is what the project ships and what ``openspec validate`` checks.
A text in another form (the plain-text seed, a README) parses to a spec whose problems say which
sections are missing.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Literal, final

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable

__all__ = [
    "Level",
    "ParsedSpec",
    "Requirement",
    "Scenario",
    "Spec",
    "SpecProblem",
    "Step",
    "StepKeyword",
    "find_scenario",
    "load_spec",
    "nearest_match",
    "nearest_scenario",
    "parse_spec",
    "slugify",
]

Level = Literal["ERROR", "WARNING", "INFO"]
StepKeyword = Literal["GIVEN", "WHEN", "THEN", "AND"]
_KEYWORDS: dict[str, StepKeyword] = {"GIVEN": "GIVEN", "WHEN": "WHEN", "THEN": "THEN", "AND": "AND"}

# OpenSpec's thresholds (src/core/validation/constants.ts).
MIN_PURPOSE_LENGTH = 50
MAX_REQUIREMENT_TEXT_LENGTH = 500

_GUIDE_MISSING_SECTIONS = (
    'Missing required sections. Expected headers: "## Purpose" and "## Requirements". Example:\n'
    "## Purpose\n[brief purpose]\n\n## Requirements\n"
    "### Requirement: Clear requirement statement\nUsers SHALL ...\n\n"
    "#### Scenario: Descriptive name\n- **WHEN** ...\n- **THEN** ..."
)
_GUIDE_SCENARIO_FORMAT = (
    "Scenarios must use level-4 headers. Convert bullet lists into:\n"
    "#### Scenario: Short name\n- **WHEN** ...\n- **THEN** ...\n- **AND** ..."
)
_NORMATIVE = re.compile(r"\b(?:SHALL|MUST)\b")
_HEADING = re.compile(r"^(#{1,6})\s+(.+)$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
# As tools/openspec-validate.sh checks them: a dash, the bold keyword, a space, the text.
_MD_STEP = re.compile(r"^- \*\*(GIVEN|WHEN|THEN|AND)\*\* (\S.*)$")
_DELTA_HEADER = re.compile(r"^##\s+(ADDED|MODIFIED|REMOVED|RENAMED)\s+Requirements\s*$", re.I)
_TITLE_SUFFIX = re.compile(r"\s+Specification\s*$", re.I)
_SLUG_JUNK = re.compile(r"[\W_]+")


def slugify(name: str) -> str:
    """``name`` lowercased, each run of non-alphanumerics one ``-``, no ``-`` at either end.

    A name with no letter or digit at all gets ``x-`` and 8 hex digits of its SHA-1, so that it
    still has a stable, non-empty slug.
    """
    slug = _SLUG_JUNK.sub("-", name.lower()).strip("-")
    if slug:
        return slug
    return "x-" + hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One ``WHEN`` / ``THEN`` / ... line of a scenario."""

    keyword: StepKeyword
    text: str
    line: int


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A scenario: its verbatim name, its steps and its stable ID."""

    name: str
    requirement: str  # the name of the requirement it belongs to
    steps: tuple[Step, ...]
    line: int  # of its `#### Scenario:` / `Scenario:` line
    slug: str
    id: str  # <capability>/<requirement-slug>/<scenario-slug>


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """A requirement: its verbatim name, its SHALL/MUST text and its scenarios in spec order."""

    name: str
    text: str  # the body before the first scenario; paragraphs joined by a blank line
    scenarios: tuple[Scenario, ...]
    line: int  # of its `### Requirement:` / `Requirement:` line
    slug: str
    id: str  # <capability>/<requirement-slug>


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Spec:
    """The model both forms parse to. Look scenarios up with :func:`find_scenario`."""

    capability: str
    purpose: str
    requirements: tuple[Requirement, ...]
    # (requirement name, scenario name) -> the first such scenario; built once.
    index: dict[tuple[str, str], Scenario] = field(init=False, repr=False, compare=False)
    by_name: dict[str, Requirement] = field(init=False, repr=False, compare=False)
    # The index by names folded for case and spacing, built by the first "did you mean".
    folded: dict[tuple[str, str], Scenario] | None = field(
        init=False, default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], Scenario] = {}
        by_name: dict[str, Requirement] = {}
        for requirement in self.requirements:
            by_name.setdefault(requirement.name, requirement)
            for scenario in requirement.scenarios:
                index.setdefault((requirement.name, scenario.name), scenario)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "by_name", by_name)

    @property
    def scenarios(self) -> tuple[Scenario, ...]:
        """Every scenario, in spec order."""
        return tuple(s for r in self.requirements for s in r.scenarios)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class SpecProblem:
    """A problem in the spec, shaped like an issue of ``openspec validate --json``.

    ``code`` names the kind of problem for programs (``"duplicate-requirement"``, ...);
    ``path`` follows OpenSpec's (``"file"``, ``"overview"``, ``"requirements[2].scenarios"``).
    """

    level: Level
    path: str
    message: str
    line: int | None
    code: str


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedSpec:
    """A :class:`Spec` and the problems found reading it.

    ``valid`` is OpenSpec's verdict: no ERROR, and with ``strict`` (``--strict``) no WARNING.
    """

    spec: Spec
    problems: tuple[SpecProblem, ...]
    source: str
    strict: bool = True

    @property
    def valid(self) -> bool:
        blocking = ("ERROR", "WARNING") if self.strict else ("ERROR",)
        return not any(p.level in blocking for p in self.problems)

    @property
    def errors(self) -> tuple[SpecProblem, ...]:
        return tuple(p for p in self.problems if p.level == "ERROR")

    @property
    def warnings(self) -> tuple[SpecProblem, ...]:
        return tuple(p for p in self.problems if p.level == "WARNING")


# --- the draft both readers fill -----------------------------------------------------------------


@dataclass(slots=True)
class _DraftScenario:
    name: str
    line: int
    header: str  # the line as written, for messages
    steps: list[Step] = field(default_factory=list)
    has_content: bool = False


@dataclass(slots=True)
class _DraftRequirement:
    name: str
    line: int
    header: str
    body: list[str] = field(default_factory=list)
    scenarios: list[_DraftScenario] = field(default_factory=list)
    stray: bool = False  # a level-3 heading that is not `### Requirement:` (OpenSpec reads it)


@dataclass(slots=True)
class _Draft:
    source: str
    title: str | None = None  # the capability the title names, if any
    path_capability: str | None = None  # the capability a path names, if any
    purpose: list[str] | None = None  # None: no Purpose section at all
    purpose_line: int | None = None
    has_requirements_section: bool = False
    requirements_line: int | None = None
    requirements: list[_DraftRequirement] = field(default_factory=list)
    problems: list[SpecProblem] = field(default_factory=list)

    def problem(
        self, level: Level, code: str, message: str, line: int | None, path: str = "file"
    ) -> None:
        self.problems.append(
            SpecProblem(level=level, path=path, message=message, line=line, code=code)
        )


# --- public entry points -------------------------------------------------------------------------


def parse_spec(text: str, *, source: str = "<spec>", strict: bool = True) -> ParsedSpec:
    """Parse ``text`` in OpenSpec's form: ``## Purpose``, ``## Requirements``,
    ``### Requirement:``, ``#### Scenario:`` and ``- **WHEN** ...`` steps.

    ``source`` is where the text came from (a path); ``specs/<capability>/spec.md`` names the
    capability when the text does not. ``strict`` is OpenSpec's ``--strict``: warnings fail.
    """
    draft = _Draft(source=source, path_capability=_capability_from_path(source))
    _read_markdown(_lines(text), draft)
    return _finish(draft, strict=strict)


def load_spec(path: str | os.PathLike[str], *, strict: bool = True) -> ParsedSpec:
    """Read the file at ``path`` (UTF-8) and :func:`parse_spec` it with ``source=path``."""
    return parse_spec(Path(path).read_text(encoding="utf-8"), source=str(path), strict=strict)


def find_scenario(spec: Spec, requirement: str, scenario: str) -> Scenario | None:
    """The scenario named exactly ``scenario`` under the requirement named exactly
    ``requirement``, or ``None``."""
    return spec.index.get((requirement, scenario))


def nearest_match(spec: Spec, requirement: str, scenario: str) -> Scenario | None:
    """The scenario a misspelt ``(requirement, scenario)`` most likely meant, or ``None``.

    Tried in order: an exact match; names equal but for case and spacing; the closest scenario
    under the requirement (exact or closest by :mod:`difflib`); the exactly named scenario under
    another requirement; the closest scenario anywhere. Never returns a poor match.
    """
    found = spec.index.get((requirement, scenario))
    if found is not None:
        return found
    folded = spec.folded
    if folded is None:
        folded = {(_fold(r), _fold(s)): sc for (r, s), sc in reversed(spec.index.items())}
        object.__setattr__(spec, "folded", folded)
    found = folded.get((_fold(requirement), _fold(scenario)))
    if found is not None:
        return found
    names = list(spec.by_name)
    owner = spec.by_name.get(requirement)
    if owner is None:
        close = difflib.get_close_matches(requirement, names, n=1, cutoff=0.6)
        owner = spec.by_name[close[0]] if close else None
    if owner is not None:
        by_scenario = {s.name: s for s in reversed(owner.scenarios)}
        if scenario in by_scenario:
            return by_scenario[scenario]
        close = difflib.get_close_matches(scenario, list(by_scenario), n=1, cutoff=0.6)
        if close:
            return by_scenario[close[0]]
    elsewhere = [s for (_, name), s in spec.index.items() if name == scenario]
    if elsewhere:
        return elsewhere[0]
    everywhere = {s.name: s for s in reversed(spec.scenarios)}
    close = difflib.get_close_matches(scenario, list(everywhere), n=1, cutoff=0.75)
    return everywhere[close[0]] if close else None


def nearest_scenario(spec: Spec, requirement: str, scenario: str) -> str | None:
    """A "did you mean" hint for a marker naming no scenario of ``spec``, or ``None``.

    The hint is the marker that would match, ready to print:
    ``did you mean @pytest.mark.spec("<requirement>", "<scenario>")?``. ``None`` when the pair
    exists already or nothing is close enough (see :func:`nearest_match`).
    """
    if (requirement, scenario) in spec.index:
        return None
    match = nearest_match(spec, requirement, scenario)
    if match is None:
        return None
    return f"did you mean @pytest.mark.spec({_quote(match.requirement)}, {_quote(match.name)})?"


# --- reading -------------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff").split("\n")


def _capability_from_path(source: str) -> str | None:
    """``specs/<capability>/spec.md`` (the directory after the last ``specs``), as OpenSpec."""
    if source.startswith("<"):
        return None
    parts = PurePath(source.replace("\\", "/")).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "specs":
            return parts[i + 1]
    if parts and parts[-1] == "spec.md" and len(parts) >= 2:
        return parts[-2]
    return None


def _fence_mask(lines: list[str]) -> list[bool]:
    """True for lines inside (or opening/closing) a fenced code block, as OpenSpec's parser."""
    mask = [False] * len(lines)
    active: tuple[str, int] | None = None
    for i, line in enumerate(lines):
        match = _FENCE.match(line)
        if active is None:
            if match:
                active = (match.group(1)[0], len(match.group(1)))
                mask[i] = True
            continue
        mask[i] = True
        if match and match.group(1)[0] == active[0] and len(match.group(1)) >= active[1]:
            active = None
    return mask


@final
class _MarkdownReader:
    """Reads OpenSpec markdown into a :class:`_Draft`, one line at a time.

    Its state is where the reader is: the level-2 ``section`` (lowercased title, ``None``
    before the first or after a level-1 heading), the ``requirement`` being read and the
    ``scenario`` being read. Invariant: a ``scenario`` is only ever set inside the current
    ``requirement``, and both are ``None`` outside ``## Requirements``. Every problem is
    recorded on the draft in line order.
    """

    def __init__(self, draft: _Draft) -> None:
        self.draft = draft
        self.section: str | None = None
        self.requirement: _DraftRequirement | None = None
        self.scenario: _DraftScenario | None = None

    def read(self, lines: list[str]) -> None:
        mask = _fence_mask(lines)
        for number, line in enumerate(lines, 1):
            if mask[number - 1]:
                self._fenced(line)
                continue
            heading = _HEADING.match(line)
            if heading is None:
                self._text(line, number)
            else:
                self._heading(len(heading.group(1)), heading.group(2).strip(), line, number)

    def _purpose(self, line: str) -> None:
        """Keep ``line`` as part of the Purpose section's text, if that is where we are."""
        if self.section == "purpose" and self.draft.purpose is not None:
            self.draft.purpose.append(line)

    def _fenced(self, line: str) -> None:
        """A line of a fenced code block: text of its requirement, scenario or purpose."""
        if self.requirement is not None and self.scenario is None:
            self.requirement.body.append(line)
        elif self.scenario is not None:
            self.scenario.has_content = True
        else:
            self._purpose(line)

    def _text(self, line: str, number: int) -> None:
        if self.scenario is not None:
            self._scenario_line(self.scenario, line, number)
        elif self.requirement is not None:
            self.requirement.body.append(line)
        else:
            self._purpose(line)

    def _scenario_line(self, scenario: _DraftScenario, line: str, number: int) -> None:
        """A step of ``scenario``; any other non-blank line is a problem."""
        stripped = line.strip()
        if not stripped:
            return
        scenario.has_content = True
        step = _MD_STEP.match(line)
        if step:
            scenario.steps.append(
                Step(keyword=_KEYWORDS[step.group(1)], text=step.group(2).strip(), line=number)
            )
        else:
            self.draft.problem(
                "ERROR",
                "stray-line",
                f"Scenario line is not a '- **WHEN|THEN|AND|GIVEN** ...' step: {stripped!r}",
                number,
            )

    def _heading(self, level: int, title: str, line: str, number: int) -> None:
        if level == 1:
            self._title(title)
        elif level == 2:
            self._section(title, line, number)
        elif self.section != "requirements":
            self._outside_requirements(level, title, line, number)
        elif level == 3:
            self._requirement(title, line, number)
        elif level == 4 and self.requirement is not None:
            self._scenario(self.requirement, title, line, number)
        else:
            self.scenario = None if level <= 4 else self.scenario
            self.draft.problem(
                "ERROR",
                "stray-heading",
                f"Unexpected heading inside Requirements: {line.strip()!r}",
                number,
            )

    def _title(self, title: str) -> None:
        if self.draft.title is None:
            self.draft.title = _TITLE_SUFFIX.sub("", title).strip() or None
        self.section, self.requirement, self.scenario = None, None, None

    def _section(self, title: str, line: str, number: int) -> None:
        draft = self.draft
        self.requirement, self.scenario = None, None
        if _DELTA_HEADER.match(line):
            draft.problem(
                "ERROR",
                "delta-header",
                f'Main spec contains delta header "{line.strip()}". Delta headers are only '
                "valid inside openspec/changes/<name>/specs/<capability>/spec.md and "
                "truncate the parsed ## Requirements section.",
                number,
            )
        lowered = title.lower()
        if lowered == "purpose" and draft.purpose is None:
            self.section = "purpose"
            draft.purpose, draft.purpose_line = [], number
        elif lowered == "requirements" and not draft.has_requirements_section:
            self.section = "requirements"
            draft.has_requirements_section, draft.requirements_line = True, number
        else:
            self.section = lowered

    def _outside_requirements(self, level: int, title: str, line: str, number: int) -> None:
        """A heading below level 2 outside ``## Requirements``: a requirement is lost there."""
        if level == 3 and title.startswith("Requirement:"):
            self.draft.problem(
                "ERROR",
                "requirement-outside-requirements",
                f'Requirement header "{line.strip()}" appears outside the main '
                "## Requirements section. Main specs only parse requirements inside that "
                "section, so this requirement is currently invisible to validate, list, "
                "and archive.",
                number,
            )
        else:
            self._purpose(line)

    def _requirement(self, title: str, line: str, number: int) -> None:
        self.scenario = None
        if not title.startswith("Requirement:"):
            self.draft.problem(
                "ERROR",
                "stray-heading",
                f"Level-3 heading is not '### Requirement: ...': {line.strip()!r}",
                number,
            )
        self.requirement = _DraftRequirement(
            name=title.removeprefix("Requirement:").strip(),
            line=number,
            header=line.strip(),
            stray=not title.startswith("Requirement:"),
        )
        self.draft.requirements.append(self.requirement)

    def _scenario(self, requirement: _DraftRequirement, title: str, line: str, number: int) -> None:
        if not title.startswith("Scenario:"):
            self.draft.problem(
                "ERROR",
                "stray-heading",
                f"Level-4 heading is not '#### Scenario: ...': {line.strip()!r}",
                number,
            )
        name = title.removeprefix("Scenario:").strip()
        self.scenario = _DraftScenario(name=name, line=number, header=line.strip())
        requirement.scenarios.append(self.scenario)


def _read_markdown(lines: list[str], draft: _Draft) -> None:
    _MarkdownReader(draft).read(lines)


# --- checking and freezing -----------------------------------------------------------------------


def _paragraphs(lines: Iterable[str]) -> str:
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def _finish(draft: _Draft, *, strict: bool) -> ParsedSpec:
    capability = _capability(draft)
    purpose = _paragraphs(draft.purpose or [])
    if not purpose:
        draft.problem(
            "ERROR",
            "missing-purpose",
            f"Spec must have a Purpose section. {_GUIDE_MISSING_SECTIONS}",
            draft.purpose_line,
        )
    elif len(purpose) < MIN_PURPOSE_LENGTH:
        draft.problem(
            "WARNING",
            "purpose-too-brief",
            f"Purpose section is too brief (less than {MIN_PURPOSE_LENGTH} characters)",
            draft.purpose_line,
            "overview",
        )
    if not draft.has_requirements_section:
        draft.problem(
            "ERROR",
            "missing-requirements-section",
            f"Spec must have a Requirements section. {_GUIDE_MISSING_SECTIONS}",
            None,
        )
    elif not draft.requirements:
        draft.problem(
            "ERROR",
            "no-requirements",
            "Spec must have at least one requirement",
            draft.requirements_line,
            "requirements",
        )

    requirements: list[Requirement] = []
    first_line: dict[str, int] = {}
    slugs: dict[str, str] = {}  # requirement slug -> the name that took it
    for index, draft_requirement in enumerate(draft.requirements):
        path = f"requirements[{index}]"
        name, number = draft_requirement.name, draft_requirement.line
        if name in first_line:
            draft.problem(
                "ERROR",
                "duplicate-requirement",
                f'Requirement header "{draft_requirement.header}" duplicates the requirement '
                f"declared on line {first_line[name]}. Requirement names must be unique so spec "
                "updates cannot discard one block while updating another.",
                number,
            )
        else:
            first_line[name] = number
        base = slugify(name)
        slug = _unique_slug(base, slugs, name)
        if slug != base and slugs[base] != name:
            draft.problem(
                "ERROR",
                "duplicate-id",
                f'Requirement "{name}" has the same ID as requirement "{slugs[base]}" '
                f"({capability}/{base}); it was given {capability}/{slug}. Rename one of them.",
                number,
                path,
            )
        text = _paragraphs(draft_requirement.body)
        if not draft_requirement.stray:  # OpenSpec checks the text of real requirements only
            _check_text(draft, name, text, number, path)
        scenarios = _freeze_scenarios(draft, draft_requirement, capability, slug, path)
        if not scenarios:
            draft.problem(
                "ERROR",
                "no-scenarios",
                f'Requirement must have at least one scenario ("{name}" has none). '
                f"{_GUIDE_SCENARIO_FORMAT}",
                number,
                f"{path}.scenarios",
            )
        requirements.append(
            Requirement(
                name=name,
                text=text,
                scenarios=tuple(scenarios),
                line=number,
                slug=slug,
                id=f"{capability}/{slug}",
            )
        )
    spec = Spec(capability=capability, purpose=purpose, requirements=tuple(requirements))
    problems = sorted(draft.problems, key=lambda p: (p.line is not None, p.line or 0))
    return ParsedSpec(spec=spec, problems=tuple(problems), source=draft.source, strict=strict)


def _capability(draft: _Draft) -> str:
    title, path = draft.title, draft.path_capability
    if title and path and slugify(title) != slugify(path):
        draft.problem(
            "INFO",
            "capability-mismatch",
            f'The title names capability "{title}" but the spec is in specs/{path}/; '
            f'the report uses "{slugify(title)}".',
            None,
        )
    chosen = title or path
    if chosen is None:
        draft.problem(
            "WARNING",
            "no-capability",
            'Neither a "# <capability> Specification" title nor a specs/<capability>/spec.md '
            'path names the capability; the report calls it "unnamed".',
            None,
        )
        return "unnamed"
    return slugify(chosen)


def _unique_slug(slug: str, taken: dict[str, str], name: str) -> str:
    """``slug``, or ``slug-2``, ``slug-3``... when another name has it; records the result."""
    candidate, n = slug, 1
    while candidate in taken:
        n += 1
        candidate = f"{slug}-{n}"
    taken[candidate] = name
    return candidate


def _check_text(draft: _Draft, name: str, text: str, line: int, path: str) -> None:
    header_only = (
        " in the requirement body, not only in the header. Move the SHALL/MUST statement to the "
        'line immediately after the "### Requirement: ..." header.'
        if _NORMATIVE.search(name)
        else ""
    )
    if not text:
        draft.problem(
            "ERROR",
            "no-shall",
            f'Requirement "{name}" must contain SHALL or MUST{header_only}',
            line,
            path,
        )
        return
    if not _NORMATIVE.search(text):
        draft.problem(
            "WARNING",
            "no-shall",
            f'Requirement "{name}" should contain SHALL or MUST{header_only} '
            "(RFC 2119 best practice for English specs)",
            line,
            path,
        )
    first = text.split("\n\n", 1)[0]
    if len(first) > MAX_REQUIREMENT_TEXT_LENGTH:
        draft.problem(
            "INFO",
            "requirement-too-long",
            f"Requirement text is very long (>{MAX_REQUIREMENT_TEXT_LENGTH} characters). "
            "Consider breaking it down.",
            line,
            path,
        )


def _freeze_scenarios(
    draft: _Draft,
    requirement: _DraftRequirement,
    capability: str,
    requirement_slug: str,
    requirement_path: str,
) -> list[Scenario]:
    scenarios: list[Scenario] = []
    first_line: dict[str, int] = {}
    slugs: dict[str, str] = {}
    for index, draft_scenario in enumerate(requirement.scenarios):
        path = f"{requirement_path}.scenarios[{index}]"
        name, number = draft_scenario.name, draft_scenario.line
        if not draft_scenario.has_content:
            draft.problem(
                "ERROR",
                "empty-scenario",
                f'Scenario "{name}" has no steps; OpenSpec does not count it as a scenario',
                number,
                path,
            )
            continue
        if name in first_line:
            draft.problem(
                "ERROR",
                "duplicate-scenario",
                f'Scenario header "{draft_scenario.header}" duplicates the scenario declared on '
                f'line {first_line[name]} in requirement "{requirement.name}". Scenario names '
                "must be unique within a requirement so that each has its own ID.",
                number,
                path,
            )
        else:
            first_line[name] = number
        base = slugify(name)
        slug = _unique_slug(base, slugs, name)
        if slug != base and slugs[base] != name:
            draft.problem(
                "ERROR",
                "duplicate-id",
                f'Scenario "{name}" has the same ID as scenario "{slugs[base]}" '
                f"({capability}/{requirement_slug}/{base}); it was given "
                f"{capability}/{requirement_slug}/{slug}. Rename one of them.",
                number,
                path,
            )
        keywords = {step.keyword for step in draft_scenario.steps}
        for needed in ("WHEN", "THEN"):
            if needed not in keywords:
                draft.problem(
                    "ERROR",
                    "missing-step",
                    f'Scenario "{name}" has no - **{needed}** step',
                    number,
                    path,
                )
        scenarios.append(
            Scenario(
                name=name,
                requirement=requirement.name,
                steps=tuple(draft_scenario.steps),
                line=number,
                slug=slug,
                id=f"{capability}/{requirement_slug}/{slug}",
            )
        )
    return scenarios


def _fold(name: str) -> str:
    return " ".join(name.split()).casefold()


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
