"""Every ```python block in README.md and docs/**/*.md runs as a reader who installed the package
runs it.

A page's blocks are pasted, in order, into one script (each block at its own line numbers of the
page, so a traceback's line is the Markdown file's), in an empty directory outside the
repository, and run there as ``python script.py`` by a fresh interpreter of a virtual environment
that holds the wheel of this checkout and only what the page tells its reader to install: its
``<!-- docs-test: pip install ... -->`` directive, a command the page must also show (see
:class:`Needs`). A page's non-Python block with a ``title="relative/path"`` is a file the page
asks its reader to create: it is written there first. A page with ``<!-- docs-test:
redis-server -->`` gets a fresh ``redis-server``, its URL in ``REDIS_URL``, and is run twice
against it, as a reader runs an example again. One test per page, named by its path; a failure
names the block and the line of the page. The wheel is built once per session and one
environment is made per distinct set of requirements (``tests/installed.py``); these tests run
once in CI (``version_independent``, in ``tox -e e2e``).

A block's shown output is checked too. A ``# -> text`` comment on a ``print(...)`` call, or on the
comment lines right after it, is what that call prints: one marker per printed line, in order, so
a print in a loop that runs twice takes two marker lines. A print without a marker is not checked.

Blocks that are deliberately not runnable use another info string (```text). ``docs/machines/`` is
generated from ``model/`` and holds no Python; it is not collected.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import re
import shlex
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from importlib.metadata import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from installed import clean_env

if TYPE_CHECKING:
    from collections.abc import Iterator

    from installed import Venv, WheelVenvs

ROOT = Path(__file__).resolve().parent.parent
FILES = (
    ROOT / "README.md",
    *sorted(
        path
        for path in (ROOT / "docs").rglob("*.md")
        if path.parent.name != "machines"  # generated from model/, no Python
    ),
)

_OPEN = re.compile(r"^(?P<indent>[ ]{0,3})(?P<fence>`{3,}|~{3,})[ ]*(?P<info>[^`\s]*)[^`]*$")
_MARKER = "# ->"
_LINK = re.compile(r"\]\((?P<target>[^)\s#:]+\.md)?(?:#(?P<anchor>[^)\s]+))?\)")
_NOT_EXECUTED_ALIASES = frozenset({"py", "python3", "py3"})


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    info: str
    index: int  # 1-based among the file's ```python blocks, 0 for any other block
    line: int  # the line number, in the Markdown file, of the block's first code line
    source: str

    @property
    def where(self) -> str:
        return f"{_shown(self.path)} block {self.index} (line {self.line})"


def _shown(path: Path) -> str:
    """A page's path as a failure names it: relative to the repository when inside it."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order; ```python blocks are numbered from 1."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    number = 0
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        info = opening["info"].lower()
        body: list[str] = []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            text = lines[i]
            body.append(text[min(indent, len(text) - len(text.lstrip(" "))) :])
            i += 1
        start = i - len(body) + 1  # 1-based line of the first body line
        index = 0
        if info == "python":
            number += 1
            index = number
        blocks.append(Block(path, info, index, start, "\n".join(body) + "\n"))
        i += 1
    return blocks


def python_blocks(path: Path) -> list[Block]:
    return [block for block in fenced_blocks(path) if block.info == "python"]


def _prints_with_markers(block: Block) -> dict[tuple[int, int], list[str]]:
    """Map each marked ``print`` call's (first line, last line) to the lines it must print.

    A marker is on one of the call's own lines, or on comment lines right after the call.
    """
    tree = ast.parse(block.source)
    calls = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
    ]
    expected: dict[tuple[int, int], list[str]] = {}
    previous: tuple[int, tuple[int, int]] | None = None  # (row, call) of the last marker
    for token in tokenize.generate_tokens(io.StringIO(block.source).readline):
        if token.type != tokenize.COMMENT or not token.string.startswith(_MARKER):
            continue
        row = token.start[0]
        if token.line.lstrip().startswith("#"):  # a comment line of its own
            holding = [span for span in calls if span[1] == row - 1]
            if previous is not None and previous[0] == row - 1:
                holding = [previous[1]]
        else:
            holding = [span for span in calls if span[0] <= row <= span[1]]
        if len(holding) != 1:
            raise AssertionError(
                f"{block.where}, line {block.line + row - 1}: a '{_MARKER}' comment must be on "
                "a print(...) call or on the comment lines right after one"
            )
        expected.setdefault(holding[0], []).append(token.string[len(_MARKER) :].strip())
        previous = (row, holding[0])
    return expected


# -- what a page declares it needs -----------------------------------------------------------------

_DIRECTIVE = re.compile(r"<!-- docs-test: (?P<what>.+?) -->")
_HIDDEN = re.compile(r"<!--.*?-->", re.DOTALL)
_PACKAGE = "diagnosis-harness"
_REDIS = "redis-server"
_SHELL = frozenset({"sh", "bash", "console", "shell"})
# Extras that some supported Pythons cannot install, and the first version that can.
_NEEDS_PYTHON = {"pydantic-ai": (3, 11), "prices": (3, 11)}


@dataclass(frozen=True)
class Needs:
    """What a page's code needs besides the wheel: its ``<!-- docs-test: ... -->`` directives.

    ``<!-- docs-test: pip install 'diagnosis-harness[a,b]' other-package -->`` names the extras
    and the other packages; the page shows its reader the same command (outside the comment).
    ``<!-- docs-test: redis-server -->`` asks for a running server, whose URL the page's code
    reads from the ``REDIS_URL`` environment variable. No directive: the wheel alone.
    """

    install: str | None = None  # the pip install command, as the page shows it
    extras: frozenset[str] = frozenset()
    packages: frozenset[str] = frozenset()
    redis: bool = False


def needs(path: Path) -> Needs:
    """The directives of the page at ``path``."""
    return parse_needs(path.read_text(encoding="utf-8"), path.name)


def parse_needs(text: str, name: str) -> Needs:
    """The directives of a page's ``text``; a ``ValueError`` naming the page for a bad one."""
    found = Needs()
    for directive in _DIRECTIVE.finditer(text):
        what = directive["what"].strip()
        if what == _REDIS:
            found = dataclasses.replace(found, redis=True)
            continue
        words = shlex.split(what)
        if words[:2] != ["pip", "install"] or len(words) < 3:
            raise ValueError(f"{name}: {directive[0]}: expected 'pip install ...' or {_REDIS!r}")
        if found.install is not None:
            raise ValueError(f"{name}: more than one 'pip install' directive")
        package, _, rest = words[2].partition("[")
        if package != _PACKAGE:
            raise ValueError(f"{name}: {directive[0]}: the first requirement must be {_PACKAGE}")
        extras = frozenset(extra.strip() for extra in rest.removesuffix("]").split(",") if rest)
        found = dataclasses.replace(
            found, install=what, extras=extras, packages=frozenset(words[3:])
        )
    return found


# -- a page run as its reader runs it --------------------------------------------------------------

DRIVER = Path(__file__).resolve().with_name("docs_driver.py")
PAGE_TIMEOUT = 180  # seconds; the slowest page takes a few
REDIS_URL = "REDIS_URL"
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')


def page_script(blocks: list[Block]) -> str:
    """The page's ```python blocks as one script, each at its own line numbers of the page."""
    lines: list[str] = []
    for block in blocks:
        lines += [""] * (block.line - 1 - len(lines))
        lines += block.source.splitlines()
    return "\n".join(lines) + "\n"


def page_files(path: Path) -> dict[str, str]:
    """The files a page asks its reader to create: its non-Python blocks with a ``title=``
    (a relative path), by title."""
    files: dict[str, str] = {}
    text = path.read_text(encoding="utf-8").splitlines()
    for block in fenced_blocks(path):
        found = _TITLE.search(text[block.line - 2])  # the opening fence's line
        if found is not None and block.info != "python":
            files[found["title"]] = block.source
    return files


def _expected_prints(blocks: list[Block]) -> dict[tuple[int, int], list[str]]:
    """Each marked ``print`` call, as its (first, last) line of the page, and what it prints."""
    return {
        (block.line + first - 1, block.line + last - 1): lines
        for block in blocks
        for (first, last), lines in _prints_with_markers(block).items()
    }


def _failed_block(blocks: list[Block], script: Path, error: str) -> str:
    """Where in the page the traceback ``error`` last passed through the page's own code."""
    lines = re.findall(rf'File "{re.escape(str(script))}", line (\d+)', error)
    if not lines:
        return _shown(blocks[0].path)
    line = int(lines[-1])
    block = next((b for b in reversed(blocks) if b.line <= line), blocks[0])
    return f"{block.where}, at line {line},"


def run_page(path: Path, python: Path, work: Path, env: dict[str, str]) -> str | None:
    """Run the page in ``work`` with the interpreter ``python``; ``None``, or what went wrong."""
    blocks = _BLOCKS[path] if path in _BLOCKS else python_blocks(path)
    for name, text in page_files(path).items():
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    # Not the page's own name: asyncio.md's script named asyncio.py would shadow the module.
    script = work / f"{path.stem.replace('-', '_')}_example.py"
    script.write_text(page_script(blocks), encoding="utf-8")
    result = work.parent / f"{script.stem}.json"
    command = [str(python), "-W", "error", str(DRIVER), str(script), str(result)]
    try:
        done = subprocess.run(
            command,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{path.name}: still running after {PAGE_TIMEOUT} s"
    if not result.is_file():
        return f"{path.name}: the interpreter ended with status {done.returncode}:\n{done.stderr}"
    outcome = json.loads(result.read_text(encoding="utf-8"))
    result.unlink()
    if outcome["error"] is not None:
        where = _failed_block(blocks, script, outcome["error"])
        return f"{where} failed:\n{outcome['error']}\nstderr:\n{done.stderr}"
    problems = []
    for (first, last), lines in _expected_prints(blocks).items():
        got = [
            line for row, text in outcome["printed"] if first <= row <= last
            for line in text.split("\n")
        ]  # fmt: skip
        if got != lines:
            problems.append(f"line {first}: expected {lines!r}, printed {got!r}")
    if problems:
        return f"{_shown(path)}: shown output differs:\n" + "\n".join(problems)
    return None


_BLOCKS = {path: python_blocks(path) for path in FILES}
_PAGES = [path for path in FILES if _BLOCKS[path]]


def _page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A fresh ``redis-server``'s URL (the Redis store's tests' server)."""
    from redis_store.server import REDIS_SERVER, RedisServer  # noqa: PLC0415 - redis-py, on use

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(directory)
    server.start()
    try:
        yield f"redis://127.0.0.1:{server.port}/0"
    finally:
        server.stop()


@pytest.mark.version_independent
@pytest.mark.end_to_end
@pytest.mark.parametrize("path", _PAGES, ids=_page_id)
def test_the_page_runs_as_its_reader_runs_it(
    path: Path, wheel_venvs: WheelVenvs, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    problem = run_as_reader(path, wheel_venvs, tmp_path, request)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def run_as_reader(
    path: Path, wheel_venvs: WheelVenvs, tmp_path: Path, request: pytest.FixtureRequest
) -> str | None:
    """Run the page as its reader would (see the module's docstring); what went wrong, or
    ``None``. Skips where the page's extras cannot be installed."""
    needed = needs(path)
    for extra in sorted(needed.extras):
        version = _NEEDS_PYTHON.get(extra)
        if version is not None and sys.version_info < version:
            pytest.skip(f"{extra} needs Python {'.'.join(map(str, version))}+")
    venv = wheel_venvs.get(needed.extras, needed.packages)
    env = clean_env()
    runs = 1
    if needed.redis:
        env[REDIS_URL] = request.getfixturevalue("redis_url")
        runs = 2  # the server keeps what the first run left: a second run must work too
    work = tmp_path / "work"
    work.mkdir()
    assert not work.resolve().is_relative_to(ROOT.resolve())
    for run in range(1, runs + 1):
        problem = run_page(path, venv.python, work, env)
        if problem is not None:
            return f"run {run} of {runs}: {problem}" if runs > 1 else problem
    return None


@pytest.mark.parametrize("path", FILES, ids=_page_id)
def test_a_page_shows_its_reader_what_it_installs(path: Path) -> None:
    """The ``pip install`` of a page's directive is shown to its reader, word for word, and its
    extras are the package's."""
    needed = needs(path)
    if needed.install is None:
        return
    visible = _HIDDEN.sub("", path.read_text(encoding="utf-8"))
    shown = set(re.findall(r"`([^`\n]+)`", visible)) | {
        line.partition(" #")[0].strip()
        for block in fenced_blocks(path)
        if block.info in _SHELL
        for line in block.source.splitlines()
    }
    assert needed.install in shown, f"{path.name}: the page does not show `{needed.install}`"
    known = set(metadata("diagnosis-harness").get_all("Provides-Extra") or [])
    assert needed.extras <= known, f"{path.name}: no such extra {sorted(needed.extras - known)}"
    assert _BLOCKS[path], f"{path.name}: a directive, and no ```python block to run"


def test_the_needs_of_a_page_are_read_from_its_directives() -> None:
    shown = "pip install 'diagnosis-harness[otel,openai]' opentelemetry-sdk"
    text = f"<!-- docs-test: {shown} -->\n<!-- docs-test: redis-server -->\n`{shown}`\n"
    assert parse_needs(text, "page.md") == Needs(
        install=shown,
        extras=frozenset({"otel", "openai"}),
        packages=frozenset({"opentelemetry-sdk"}),
        redis=True,
    )
    assert parse_needs("`pip install diagnosis-harness`", "page.md") == Needs()
    with pytest.raises(ValueError, match=r"page\.md: .* the first requirement must be"):
        parse_needs("<!-- docs-test: pip install requests -->", "page.md")
    with pytest.raises(ValueError, match=r"page\.md: more than one"):
        parse_needs(f"<!-- docs-test: {shown} -->\n<!-- docs-test: {shown} -->", "page.md")


def test_a_page_is_one_script_at_the_pages_own_line_numbers() -> None:
    path = ROOT / "docs" / "guides" / "wiring-sdk-clients.md"
    lines = page_script(_BLOCKS[path]).splitlines()
    page = path.read_text(encoding="utf-8").splitlines()
    for block in _BLOCKS[path]:
        for offset, line in enumerate(block.source.splitlines()):
            assert lines[block.line - 1 + offset] == line
            assert page[block.line - 1 + offset].endswith(line)
    assert "config/application.yaml" in page_files(path)


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_a_failing_block_and_a_wrong_output_are_named(bare_venv: Venv, tmp_path: Path) -> None:
    """The runner fails a page whose block raises, naming the block and the page's line, and one
    whose marked output differs; it passes the same page when it is right."""
    page = tmp_path / "page.md"
    good = "Text.\n\n```python\nx = 2\n```\n\nMore.\n\n```python\nprint(x * 2)  # -> 4\n```\n"
    cases = {
        "right": (good, None),
        "raises": (good.replace("x * 2", "x / 0"), "page.md block 2 (line 10), at line 10,"),
        "differs": (good.replace("x = 2", "x = 3"), "line 10: expected ['4'], printed ['6']"),
    }
    for name, (text, expected) in cases.items():
        page.write_text(text, encoding="utf-8")
        work = tmp_path / name
        work.mkdir()
        problem = run_page(page, bare_venv.python, work, clean_env())
        if expected is None:
            assert problem is None, problem
        else:
            assert problem is not None, name
            assert expected in problem, problem


def test_the_docs_have_python_blocks() -> None:
    assert sum(len(blocks) for blocks in _BLOCKS.values()) > 0


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_python_block_escapes_under_another_name(path: Path) -> None:
    """```py or ```python3 would not be executed here: spell it ```python (or ```text)."""
    aliases = [b.line for b in fenced_blocks(path) if b.info in _NOT_EXECUTED_ALIASES]
    assert not aliases, f"{path.name}: use ```python or ```text for the blocks at lines {aliases}"


_INCLUDE = re.compile(r'^--8<-- "(?P<page>[^":]+):(?P<section>[\w-]+)"$', re.MULTILINE)
# The primitive pages that show a machine, and the machine page they include it from.
_MACHINE_OF_PAGE = {
    "lifecycle.md": "lifecycle.md",
    "budget-and-capacity.md": "budget.md",
    "retry.md": "retry.md",
}


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_machine_sections_are_included_not_copied(path: Path) -> None:
    """A page shows a generated diagram or table by including it (codegen owns the text).

    A machine's diagram is a mermaid state diagram; other pictures (a flowchart) may be drawn.
    """
    copies = [
        b.line
        for b in fenced_blocks(path)
        if b.info == "mermaid" and b.source.lstrip().startswith("stateDiagram")
    ]
    assert not copies, f"{path.name}: mermaid copied at lines {copies}; include it with --8<--"
    for include in _INCLUDE.finditer(path.read_text(encoding="utf-8")):
        source = ROOT / "docs" / include["page"]
        section = include["section"]
        assert source.is_file(), f"{path.name}: {include[0]} names no file under docs/"
        assert f"<!-- --8<-- [start:{section}] -->" in source.read_text(encoding="utf-8"), (
            f"{path.name}: {include[0]}: {source.name} has no section {section!r}"
        )


@pytest.mark.parametrize(("page", "machine"), sorted(_MACHINE_OF_PAGE.items()))
def test_primitive_pages_show_their_machine(page: str, machine: str) -> None:
    included = {
        (m["page"], m["section"])
        for m in _INCLUDE.finditer((ROOT / "docs" / page).read_text(encoding="utf-8"))
    }
    wanted = {(f"machines/{machine}", "diagram"), (f"machines/{machine}", "transitions")}
    assert wanted <= included, f"{page} does not include {sorted(wanted - included)}"


def _anchors(path: Path) -> set[str]:
    """The heading anchors GitHub makes for ``path``, outside fenced blocks."""
    fenced = {
        line
        for block in fenced_blocks(path)
        for line in range(block.line - 1, block.line + block.source.count("\n") + 1)
    }
    anchors = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if number in fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path) -> None:
    """Every relative link to a Markdown page, and its #anchor, exists."""
    broken = []
    for match in _LINK.finditer(path.read_text(encoding="utf-8")):
        target = path.parent / match["target"] if match["target"] else path
        anchor = match["anchor"]
        if not target.is_file() or (anchor and anchor not in _anchors(target)):
            broken.append(match[0])
    assert not broken, f"{path.name}: broken links {broken}"


def test_the_performance_page_shows_the_recorded_results() -> None:
    """docs/performance.md's figures are benchmarks/results/ as publish.py renders them."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "publish.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_index_lists_every_exception_the_package_exports() -> None:
    """docs/index.md's "Exceptions at a glance" has a row for each exception class of
    ``diagnosis_harness.__all__``."""
    import diagnosis_harness  # noqa: PLC0415 - only this test reads the package's names

    exported = {
        name
        for name in diagnosis_harness.__all__
        if isinstance(value := getattr(diagnosis_harness, name), type)
        and issubclass(value, BaseException)
    }
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    table = text[text.index("## Exceptions at a glance") :]
    rows = set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE))
    assert exported - rows == set(), f"docs/index.md lists no row for {sorted(exported - rows)}"
    assert rows - exported == set(), f"docs/index.md lists unexported {sorted(rows - exported)}"


_REDIS_PAGE = """\
<!-- docs-test: pip install 'diagnosis-harness[redis]' -->
<!-- docs-test: redis-server -->
`pip install 'diagnosis-harness[redis]'`

```python
import os

import redis

client = redis.Redis.from_url(os.environ["REDIS_URL"])
print(client.ping())  # -> True
FIRST
```
"""


@pytest.mark.version_independent
@pytest.mark.end_to_end
@pytest.mark.parametrize(
    ("first", "expected"),
    [
        ("client.incr('runs')", None),
        ("assert client.set('run', 1, nx=True), 'the run exists already'", "run 2 of 2: "),
    ],
    ids=["reruns", "fails-on-a-second-run"],
)
def test_a_redis_page_gets_a_server_and_runs_twice(
    first: str,
    expected: str | None,
    wheel_venvs: WheelVenvs,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The contract a page needing Redis follows: the server's URL is in ``REDIS_URL``, and the
    page runs twice against the same server, as a reader runs an example again."""
    page = tmp_path / "redis-page.md"
    page.write_text(_REDIS_PAGE.replace("FIRST", first), encoding="utf-8")
    problem = run_as_reader(page, wheel_venvs, tmp_path, request)
    if expected is None:
        assert problem is None, problem
    else:
        assert problem is not None
        assert problem.startswith(expected), problem
        assert "AssertionError: the run exists already" in problem
