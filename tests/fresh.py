"""Code run in a fresh interpreter: an import check sees only what the code itself imports.

In the test process other tests have imported everything, so whether a module imports an SDK,
or what it says when one is missing, is asked of a new interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def run_fresh(code: str, *, extra_path: Path | None = None) -> str:
    """Run ``code`` (dedented) with ``python -c``; its stdout, stripped. It must exit 0.

    ``extra_path`` goes first on ``PYTHONPATH``: a folder with a stand-in package (a broken SDK,
    a ``sitecustomize``) that the interpreter then finds before the installed one.
    """
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.strip()
