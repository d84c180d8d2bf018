"""Where the spec, the configuration and the conformance suite are: in the wheel or the checkout.

Theory of operation. A wheel carries copies of ``specs/diagnosis-harness-run-context/spec.md``
and ``config/application.yaml`` under ``diagnosis_harness/conformance/_data/``, at the same
relative paths (hatch's ``force-include``, see pyproject.toml; ``specs/<capability>/spec.md`` is
how a spec's path names its capability); the source tree never holds them, so there is no copy
to keep in step by hand. An editable install imports the package from the checkout's ``src/``,
where ``_data/`` does not exist, so the checkout's own files are used: ``<root>/specs/...`` and
``<root>/config/...``, where ``<root>`` is the directory holding ``src/diagnosis_harness``.
(An editable install also drops a copy of the forced files into site-packages, frozen at install
time; it is never read, because the package's ``__file__`` is in the checkout.)

The suite is a package of the library (:mod:`diagnosis_harness.conformance.suite`) and is always
next to this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, final

__all__ = [
    "CONFIG_PATH",
    "DATA_DIR",
    "SPEC_CAPABILITY",
    "SPEC_PATH",
    "Located",
    "checkout_root",
    "config_path",
    "locate_config",
    "locate_spec",
    "spec_path",
    "suite_dir",
]

SPEC_CAPABILITY = "diagnosis-harness-run-context"
SPEC_PATH = ("specs", SPEC_CAPABILITY, "spec.md")
"""The spec's path relative to the checkout's root, and to ``DATA_DIR`` in a wheel."""
CONFIG_PATH = ("config", "application.yaml")
"""The configuration's path relative to the checkout's root, and to ``DATA_DIR`` in a wheel."""

_HERE = Path(__file__).resolve().parent
DATA_DIR = _HERE / "_data"
"""Where a wheel keeps its copies (absent from the source tree)."""

Origin = Literal["shipped", "checkout"]


@final
class Located:
    """A file and where it came from: ``"shipped"`` (the wheel's copy) or ``"checkout"``."""

    __slots__ = ("origin", "path")

    def __init__(self, path: Path, origin: Origin) -> None:
        self.path = path
        self.origin: Origin = origin

    def __repr__(self) -> str:
        return f"Located({str(self.path)!r}, {self.origin!r})"


def checkout_root() -> Path | None:
    """The repository root when the package is imported from a checkout's ``src/``, else None."""
    package = _HERE.parent  # .../diagnosis_harness
    if package.parent.name != "src":
        return None
    root = package.parent.parent
    if not (root / "pyproject.toml").is_file():
        return None
    return root


def _locate(relative: tuple[str, ...], what: str) -> Located:
    shipped = DATA_DIR.joinpath(*relative)
    if shipped.is_file():
        return Located(shipped, "shipped")
    root = checkout_root()
    if root is not None:
        candidate = root.joinpath(*relative)
        if candidate.is_file():
            return Located(candidate, "checkout")
    looked = [str(shipped)]
    if root is not None:
        looked.append(str(root.joinpath(*relative)))
    raise FileNotFoundError(
        f"the {what} is neither shipped in the package nor in a checkout; looked at: "
        + ", ".join(looked)
        + " (a wheel built by hatchling from pyproject.toml carries it in conformance/_data/)"
    )


def locate_spec() -> Located:
    """The project's spec: the wheel's copy, else the checkout's ``specs/<capability>/spec.md``."""
    return _locate(SPEC_PATH, "spec")


def locate_config() -> Located:
    """The application configuration: the wheel's copy, else the checkout's
    ``config/application.yaml``."""
    return _locate(CONFIG_PATH, "application configuration")


def spec_path() -> Path:
    """The path of :func:`locate_spec`."""
    return locate_spec().path


def config_path() -> Path:
    """The path of :func:`locate_config`."""
    return locate_config().path


def suite_dir() -> Path:
    """The directory of the conformance suite, :mod:`diagnosis_harness.conformance.suite`."""
    return _HERE / "suite"
