"""docs/workers.md's two-process example runs as written, as a pip user runs it.

The page's first ```python block is the program (the page is its only copy): saved as
``two_workers.py`` outside the repository and run with a Redis URL, twice -- it makes a fresh
run ID each time -- with every extra but ``redis`` blocked (``sys.modules[name] = None`` in a
``sitecustomize`` on ``PYTHONPATH``, which the spawned worker inherits). Cost: about 3 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .server import RedisServer

pytestmark = pytest.mark.version_independent

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workers.md"
# What the other extras would bring; the page names only the redis extra.
_OTHER_EXTRAS = (
    "openai",
    "anthropic",
    "pydantic_ai",
    "agents",
    "opentelemetry",
    "yaml",
    "statemachine",
    "hypothesis",
    "jinja2",
)


def _program() -> str:
    match = re.search(r"^```python\n(?P<code>.*?)^```$", PAGE.read_text(), re.MULTILINE | re.DOTALL)
    assert match is not None, "docs/workers.md has no ```python block"
    return match["code"]


def test_the_two_worker_example_runs_again_and_again_outside_the_repository(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    program = tmp_path / "two_workers.py"
    program.write_text(_program())
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in _OTHER_EXTRAS)
    )
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    for _ in range(2):  # a fixed run ID made the second run a RunStoreConflict
        result = subprocess.run(
            [sys.executable, str(program), f"redis://127.0.0.1:{redis_server.port}/3"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            "tool calls so far: 1",
            "tool worker: released (CLIENT_DISCONNECTED)",
            "agent loop: CANCELLED",
        ], result.stdout


def test_the_page_shows_the_code_not_an_include() -> None:
    """Markdown read without mkdocs (GitHub, an editor) shows a snippet line as it is."""
    assert "--8<--" not in PAGE.read_text()
