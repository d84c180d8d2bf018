"""Which code made a conformance report, when and how: :class:`~._report.Identity`.

The git commit and dirty flag come from ``git`` itself (a subprocess: no library reads a
repository as faithfully), and are ``None`` when the project is not a git checkout (an installed
wheel), git is not installed, or it does not answer within a few seconds. ``dirty`` counts
changes to tracked files only, as ``git describe --dirty`` does: a stray build directory does not
make a report's code unknown.
"""

from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path
from typing import Final

from .. import __version__
from ._report import Identity

__all__ = ["collect_identity", "git_state", "project_root", "shown_path"]

_GIT_TIMEOUT: Final = 5.0  # seconds; git answers these in milliseconds


def _git(directory: Path, *args: str) -> str | None:
    """``git -C directory args``'s output, or ``None`` when git cannot answer."""
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def project_root(directory: Path) -> Path:
    """The top of the git checkout holding ``directory``; else the nearest directory at or above
    it holding a ``pyproject.toml`` (``diagnosis-harness report`` runs pytest with its rootdir at
    ``src/``); else ``directory`` itself."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top and top.strip():
        return Path(top.strip())
    for candidate in (directory, *directory.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    return directory


def git_state(directory: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout holding ``directory``; (None, None) outside one."""
    commit = _git(directory, "rev-parse", "--verify", "HEAD")
    if commit is None or not commit.strip():
        return None, None
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    return commit.strip(), None if status is None else bool(status.strip())


def shown_path(path: str | Path, root: Path) -> str:
    """``path`` relative to ``root`` (POSIX separators) when inside it, else its file name.

    A report never carries an absolute path of the machine that made it.
    """
    candidate = Path(path)
    try:
        return candidate.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return candidate.name if candidate.is_absolute() else candidate.as_posix()


def collect_identity(
    root: Path,
    *,
    hypothesis_profile: str | None,
    hypothesis_seed: str | None,
    now: datetime.datetime | None = None,
) -> Identity:
    """The identity of a report made now from the project at ``root``."""
    commit, dirty = git_state(root)
    moment = datetime.datetime.now(datetime.timezone.utc) if now is None else now
    return Identity(
        version=__version__,
        python=platform.python_version(),
        commit=commit,
        dirty=dirty,
        generated_at=moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds"),
        hypothesis_profile=hypothesis_profile,
        hypothesis_seed=hypothesis_seed,
    )
