"""The Core never imports the integrations; the integrations import no SDK until one is needed.

Each check runs in a fresh interpreter: in this one, other tests have imported everything.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from fresh import run_fresh

OPTIONAL = ("openai", "anthropic", "yaml", "httpx", "httpx2", "pydantic", "opentelemetry")


def _loaded(names: tuple[str, ...]) -> str:
    return f"""
        import sys
        print(sorted(m for m in sys.modules if m.split(".")[0] in {names!r}))
    """


def test_the_core_does_not_import_the_integrations() -> None:
    code = "import diagnosis_harness, diagnosis_harness.testing\n" + textwrap.dedent(
        _loaded(("diagnosis_harness", *OPTIONAL))
    )
    loaded = run_fresh(code)
    assert "diagnosis_harness.integrations" not in loaded
    for name in OPTIONAL:
        assert f"'{name}'" not in loaded


def test_importing_the_integrations_imports_no_sdk_and_no_yaml() -> None:
    code = "import diagnosis_harness.integrations\n" + textwrap.dedent(_loaded(OPTIONAL))
    assert run_fresh(code) == "[]"


def test_classifiers_and_configuration_from_a_document_import_nothing() -> None:
    code = """
        from diagnosis_harness.integrations import ModelClientConfig, classify_sdk
        assert classify_sdk(ConnectionError()) is None
        assert ModelClientConfig.from_document({"model_client": {"max_attempts": 1}})
    """ + _loaded(OPTIONAL)
    assert run_fresh(code) == "[]"


def test_loading_the_configuration_imports_yaml_and_no_sdk() -> None:
    path = Path(__file__).resolve().parents[2] / "config" / "application.yaml"
    code = f"""
        import sys
        from diagnosis_harness.integrations import load_model_client_config
        load_model_client_config({str(path)!r})
        assert "yaml" in sys.modules
    """ + _loaded(("openai", "anthropic", "httpx", "httpx2"))
    assert run_fresh(code) == "[]"


def test_a_broken_sdk_install_is_not_reported_as_missing(tmp_path: Path) -> None:
    """Only the SDK itself missing means "install the extra"; its own missing import propagates."""
    fake = tmp_path / "openai"
    fake.mkdir()
    (fake / "__init__.py").write_text("import a_dependency_that_is_not_installed\n")
    code = """
        from diagnosis_harness.integrations import ModelClientConfig, openai_client
        try:
            openai_client(ModelClientConfig(), api_key="k")
        except ModuleNotFoundError as error:
            print(error.name)
    """
    assert run_fresh(code, extra_path=tmp_path) == "a_dependency_that_is_not_installed"


def test_a_missing_extra_that_needs_a_newer_python_says_so() -> None:
    """On a Python older than the package supports, the extra installs nothing: the message says
    which Python it needs instead of only the install command, which would not help."""
    from diagnosis_harness.integrations._extras import missing_extra  # noqa: PLC0415

    newer = (sys.version_info[0], sys.version_info[1] + 1)
    message = str(missing_extra("pydantic_ai", "pydantic-ai", "the capability", python=newer))
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"supports Python {newer[0]}.{newer[1]}+ only (this is Python {running})" in message
    assert "pip install 'diagnosis-harness[pydantic-ai]'" in message
    older = (3, 0)
    assert str(missing_extra("pydantic_ai", "pydantic-ai", "x", python=older)) == str(
        missing_extra("pydantic_ai", "pydantic-ai", "x")
    )
