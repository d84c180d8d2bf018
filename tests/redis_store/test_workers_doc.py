"""docs/workers.md's two-process example runs as written, against the session's server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .server import RedisServer

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "two_workers.py"


def test_the_two_worker_example_runs(redis_server: RedisServer) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), f"redis://127.0.0.1:{redis_server.port}/3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "tool calls so far: 1",
        "tool worker: released (CLIENT_DISCONNECTED)",
        "agent loop: CANCELLED",
    ], result.stdout
