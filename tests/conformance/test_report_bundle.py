"""Where the suite finds the spec and the configuration: a wheel's copies, else the checkout's.

The wheel itself is built and installed in ``test_report_wheel.py``; here the two lookups are
checked in this environment (an editable install of the checkout, or under tox an installed
wheel) and with ``DATA_DIR`` pointed elsewhere.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.conformance import _bundle
from diagnosis_harness.conformance._bundle import (
    CONFIG_PATH,
    DATA_DIR,
    SPEC_PATH,
    checkout_root,
    locate_config,
    locate_spec,
    suite_dir,
)

from ._support import ROOT

if TYPE_CHECKING:
    from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def test_in_a_checkout_its_own_files_are_used() -> None:
    if checkout_root() is None:
        pytest.skip("diagnosis_harness is imported from an installed wheel, not this checkout")
    assert checkout_root() == ROOT
    spec, config = locate_spec(), locate_config()
    assert (spec.origin, spec.path) == ("checkout", ROOT.joinpath(*SPEC_PATH))
    assert (config.origin, config.path) == ("checkout", ROOT.joinpath(*CONFIG_PATH))
    # No copy is kept in the source tree: the wheel gets its copies at build time.
    assert not DATA_DIR.exists()


def test_from_a_wheel_the_shipped_copies_are_used() -> None:
    if checkout_root() is not None:
        pytest.skip("diagnosis_harness is imported from this checkout (test_report_wheel.py)")
    spec, config = locate_spec(), locate_config()
    assert (spec.origin, spec.path) == ("shipped", DATA_DIR.joinpath(*SPEC_PATH))
    assert (config.origin, config.path) == ("shipped", DATA_DIR.joinpath(*CONFIG_PATH))
    assert spec.path.read_bytes() == ROOT.joinpath(*SPEC_PATH).read_bytes()


def test_a_shipped_copy_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tmp_path.joinpath(*SPEC_PATH)
    shipped.parent.mkdir(parents=True)
    shipped.write_text("# copy\n", encoding="utf-8")
    monkeypatch.setattr(_bundle, "DATA_DIR", tmp_path)
    assert (locate_spec().origin, locate_spec().path) == ("shipped", shipped)


def test_neither_copy_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bundle, "DATA_DIR", tmp_path)
    monkeypatch.setattr(_bundle, "checkout_root", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"the spec is neither shipped .* looked at: "):
        locate_spec()
    with pytest.raises(FileNotFoundError, match="the application configuration is neither"):
        locate_config()


def test_the_wheel_ships_exactly_what_the_bundle_looks_for() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    forced = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    inside = "diagnosis_harness/conformance/_data"
    assert forced == {
        "/".join(SPEC_PATH): f"{inside}/{'/'.join(SPEC_PATH)}",
        "/".join(CONFIG_PATH): f"{inside}/{'/'.join(CONFIG_PATH)}",
    }
    for source in forced:
        assert (ROOT / source).is_file(), source
    assert project["project"]["entry-points"]["pytest11"] == {
        "diagnosis_harness": "diagnosis_harness.conformance._plugin"
    }
    assert (
        "src/diagnosis_harness/conformance/suite"
        in project["tool"]["pytest"]["ini_options"]["testpaths"]
    )


def test_the_suite_is_a_package_next_to_the_bundle() -> None:
    suite = suite_dir()
    assert (suite / "__init__.py").is_file()
    assert (suite / "suite.ini").is_file()
    assert sorted(p.name for p in suite.glob("test_*.py")) == [
        "test_budgets.py",
        "test_core_independence.py",
        "test_deadline_and_cancellation.py",
        "test_harness_retry.py",
        "test_hidden_retry.py",
        "test_keys_and_capacity.py",
        "test_run_context.py",
        "test_terminal_outcome.py",
    ]
