"""Every ```python block in README.md and docs/*.md runs as written.

Each file's blocks run in order in one fresh namespace per file, so a later block can use the names
an earlier one defined. One test per block, named ``<file>#<n>`` (n from 1): a failure names the
file, the block and the line in the Markdown file (blocks are compiled at their own line numbers,
so a traceback points into the ``.md`` file).

A block's shown output is checked too. A ``# -> text`` comment on a ``print(...)`` call, or on the
comment lines right after it, is what that call prints: one marker per printed line, in order, so
a print in a loop that runs twice takes two marker lines. A print without a marker is not checked.

Blocks that are deliberately not runnable use another info string (```text). ``docs/machines/`` is
generated from ``model/`` and holds no Python; it is not collected.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import io
import re
import subprocess
import sys
import threading
import tokenize
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

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
# Pages whose examples need a package some supported Pythons cannot install.
_NEEDS = {
    "docs/guides/pydantic-ai.md": "pydantic_ai",
    "docs/guides/opentelemetry.md": "pydantic_ai",
}


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
        return f"{self.path.relative_to(ROOT).as_posix()} block {self.index} (line {self.line})"


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


class _Writer(Protocol):
    def write(self, text: str, /) -> object: ...


@dataclass
class _Recorder:
    """A ``print`` for the blocks' namespace: prints as usual and remembers who printed what."""

    filename: str
    offset: int  # the Markdown line number minus the block line number
    lock: threading.Lock = field(default_factory=threading.Lock)
    printed: list[tuple[int, str]] = field(default_factory=list)  # (block line, text)

    def __call__(
        self,
        *args: object,
        sep: str | None = " ",
        end: str | None = "\n",
        file: _Writer | None = None,
        flush: bool = False,
    ) -> None:
        if file is not None:  # printing somewhere else: not the block's shown output
            builtins.print(*args, sep=sep, end=end, file=file)
            return
        buffer = io.StringIO()
        builtins.print(*args, sep=sep, end=end, file=buffer)
        text = buffer.getvalue()
        sys.stdout.write(text)
        if flush:
            sys.stdout.flush()
        caller = sys._getframe(1)
        if caller.f_code.co_filename == self.filename:
            with self.lock:
                self.printed.append((caller.f_lineno - self.offset, text.removesuffix("\n")))


@dataclass
class _FileRun:
    """One Markdown file's namespace and how far its blocks have run."""

    path: Path
    namespace: dict[str, object] = field(default_factory=dict)
    done: int = 0  # blocks 1..done ran successfully
    failed: str | None = None  # where the first failing block is

    def run_through(self, block: Block, blocks: list[Block]) -> None:
        """Run every block before ``block`` not yet run, then ``block`` itself."""
        if self.failed is not None:
            pytest.fail(f"{block.where}: not run, because {self.failed} failed", pytrace=False)
        for earlier in blocks[self.done : block.index]:
            error = _run_block(self._execute, earlier)
            if error is not None:
                self.failed = earlier.where
                if earlier is block:
                    pytest.fail(f"{block.where} failed:\n{error}", pytrace=False)
                pytest.fail(
                    f"{block.where}: not run, because {earlier.where} failed:\n{error}",
                    pytrace=False,
                )
            self.done = earlier.index

    def _execute(self, block: Block) -> None:
        filename = str(block.path)  # a traceback then shows the line of the Markdown file itself
        offset = block.line - 1
        expected = _prints_with_markers(block)
        recorder = _Recorder(filename, offset)
        self.namespace.setdefault("__name__", f"docs_{block.path.stem.replace('-', '_')}")
        self.namespace["print"] = recorder
        code = compile("\n" * offset + block.source, filename, "exec", dont_inherit=True)
        exec(code, self.namespace)
        problems = []
        for (first, last), lines in expected.items():
            got = [
                line
                for row, text in recorder.printed
                if first <= row <= last
                for line in text.split("\n")
            ]
            if got != lines:
                where = f"line {block.line + first - 1}"
                problems.append(f"{where}: expected {lines!r}, printed {got!r}")
        if problems:
            raise AssertionError(f"{block.where}: shown output differs:\n" + "\n".join(problems))


def _run_block(execute: Callable[[Block], None], block: Block) -> str | None:
    """Run ``block``; None, or its error with the traceback from the block's own frames on."""
    try:
        execute(block)
    except BaseException as error:  # a doc block may raise anything, SystemExit included
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # this harness's own frames say nothing about the block
        return "".join(traceback.format_exception(type(error), error, tb))
    return None


_BLOCKS = {path: python_blocks(path) for path in FILES}
_RUNS: dict[Path, _FileRun] = {}


def _block_id(block: Block) -> str:
    return f"{block.path.relative_to(ROOT).as_posix()}#{block.index}"


@pytest.mark.parametrize(
    "block", [block for blocks in _BLOCKS.values() for block in blocks], ids=_block_id
)
def test_python_block_runs(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    needed = _NEEDS.get(block.path.relative_to(ROOT).as_posix())
    if needed is not None and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{block.where} needs {needed!r}, not installed (pydantic-ai: Python 3.11+)")
    monkeypatch.chdir(ROOT)  # a block's relative paths (config/application.yaml) are the repo's
    run = _RUNS.setdefault(block.path, _FileRun(block.path))
    run.run_through(block, _BLOCKS[block.path])


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


def test_the_quickstart_runs_as_a_script_of_its_own(tmp_path: Path) -> None:
    """The quickstart is one block a newcomer pastes into a file: it needs nothing else."""
    (block,) = _BLOCKS[ROOT / "docs" / "quickstart.md"]
    script = tmp_path / "quickstart.py"
    script.write_text(block.source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    shown = [line for lines in _prints_with_markers(block).values() for line in lines]
    assert done.stdout.splitlines() == shown


def test_the_performance_page_shows_the_recorded_results() -> None:
    """docs/performance.md's figures are benchmarks/results/ as publish.py renders them."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "publish.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
