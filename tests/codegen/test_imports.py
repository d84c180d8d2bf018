"""Optional packages are needed only where they are used, and their absence says what to install.

Each probe runs in a fresh interpreter with packages blocked: ``sys.modules[name] = None``
makes ``import name`` raise ModuleNotFoundError, as if it were not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Runs `statement` with the `blocked` modules unimportable; prints {"error": None or the error}.
PROBE = """
import json, sys
for name in sys.argv[2:]:
    sys.modules[name] = None
report = {"error": None}
try:
    exec(sys.argv[1])
except ImportError as exc:
    cause = exc.__cause__
    report["error"] = {
        "type": type(exc).__name__,
        "message": str(exc),
        "cause": None if cause is None else type(cause).__name__,
        "cause_name": getattr(cause, "name", None),
    }
print(json.dumps(report))
"""


def _probe(statement: str, *blocked: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, statement, *blocked],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report: dict[str, object] = json.loads(result.stdout)
    return report


def test_runtime_imports_without_python_statemachine() -> None:
    report = _probe("import diagnosis_harness, diagnosis_harness._generated.tables", "statemachine")
    assert report["error"] is None


def test_generated_models_without_python_statemachine_name_the_extra() -> None:
    report = _probe("import diagnosis_harness._generated.models", "statemachine")
    assert report["error"] == {
        "type": "ImportError",
        "message": "diagnosis_harness._generated.models needs python-statemachine: "
        "pip install 'diagnosis-harness[modelcheck]'",
        "cause": "ModuleNotFoundError",
        "cause_name": "statemachine",
    }


def test_the_generator_imports_without_a_toml_parser() -> None:
    # Only reading a table needs tomllib (tomli on Python 3.10): importing the generator does not.
    report = _probe("import diagnosis_harness.codegen", "tomllib", "tomli")
    assert report["error"] is None


@pytest.mark.skipif(
    sys.version_info >= (3, 11), reason="tomllib is in the standard library: tomli is not used"
)
def test_reading_a_table_without_tomli_names_it() -> None:
    statement = (
        "from pathlib import Path\n"
        "from diagnosis_harness.codegen import load_machine\n"
        f"load_machine(Path({str(FIXTURES / 'valid.toml')!r}))\n"
    )
    report = _probe(statement, "tomli")
    assert report["error"] == {
        "type": "ImportError",
        "message": "diagnosis_harness.codegen reads model/*.toml with tomli on Python 3.10: "
        "pip install 'tomli>=2.0'",
        "cause": "ModuleNotFoundError",
        "cause_name": "tomli",
    }
