"""The application configuration: ``model_client.max_attempts`` is 1, and nothing else loads."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import yaml

from diagnosis_harness import HarnessError
from diagnosis_harness.integrations import (
    DEFAULT_CONFIG_PATH,
    ConfigurationError,
    ModelClientConfig,
    load_model_client_config,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
APPLICATION_YAML = REPO_ROOT / "config" / "application.yaml"
WHY = "only HarnessRetryExecutor retries, so that every retry is a recorded attempt"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "application.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_default_path_is_the_repository_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Path("config", "application.yaml") == DEFAULT_CONFIG_PATH
    monkeypatch.chdir(REPO_ROOT)
    assert load_model_client_config() == load_model_client_config(APPLICATION_YAML)


def test_repository_configuration_has_finite_timeout_and_sdk_default_endpoint() -> None:
    config = load_model_client_config(str(APPLICATION_YAML))
    assert config.timeout_seconds > 0
    assert math.isfinite(config.timeout_seconds)
    assert type(config.timeout_seconds) is float
    assert config.base_url is None


def test_full_section_loads(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "other_app_section: {x: 1}\n"
        "model_client:\n"
        "  max_attempts: 1\n"
        "  timeout_seconds: 2.5\n"
        "  base_url: http://127.0.0.1:8080/v1\n",
    )
    assert load_model_client_config(path) == ModelClientConfig(
        max_attempts=1, timeout_seconds=2.5, base_url="http://127.0.0.1:8080/v1"
    )


@pytest.mark.parametrize("value", ["0", "2", "3", "-1", "10"])
def test_any_other_count_is_refused_with_the_reason(tmp_path: Path, value: str) -> None:
    path = _write(tmp_path, f"model_client:\n  max_attempts: {value}\n")
    with pytest.raises(ConfigurationError) as raised:
        load_model_client_config(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: model_client.max_attempts must be 1, got {value}")
    assert WHY in message
    assert "multiply requests unseen" in message


@pytest.mark.parametrize(
    ("value", "shown"),
    [("true", "bool True"), ('"1"', "str '1'"), ("1.0", "float 1.0"), ("[1]", "list [1]")],
)
def test_a_non_integer_is_refused_even_if_it_looks_like_one(
    tmp_path: Path, value: str, shown: str
) -> None:
    path = _write(tmp_path, f"model_client:\n  max_attempts: {value}\n")
    with pytest.raises(ConfigurationError, match="must be the integer 1") as raised:
        load_model_client_config(path)
    assert shown in str(raised.value)
    assert WHY in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "expected a mapping with a 'model_client' section, got NoneType None"),
        ("- 1\n", "expected a mapping with a 'model_client' section, got list [1]"),
        ("other: {}\n", "no 'model_client' section; add 'model_client: {max_attempts: 1}'"),
        ("model_client:\n", "no 'model_client' section"),
        ("model_client: 1\n", "model_client must be a mapping, got int 1"),
        ("model_client: {}\n", "model_client.max_attempts is not set; it must be stated"),
        ("model_client: {timeout_seconds: 5}\n", "model_client.max_attempts is not set"),
        (
            "model_client: {max_attempts: 1, max_retries: 0}\n",
            "unknown setting(s) in model_client: 'max_retries'; "
            "known: max_attempts, timeout_seconds, base_url",
        ),
    ],
)
def test_a_missing_or_misshapen_section_is_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigurationError) as raised:
        load_model_client_config(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert expected in str(raised.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "must be finite and > 0, got 0"),
        ("-1.5", "must be finite and > 0, got -1.5"),
        (".inf", "must be finite and > 0, got inf"),
        (".nan", "must be finite and > 0, got nan"),
        ("true", "must be a number of seconds, got bool True"),
        ('"60"', "must be a number of seconds, got str '60'"),
        ("null", "must be a number of seconds, got NoneType None"),
    ],
)
def test_a_bad_timeout_is_refused(tmp_path: Path, value: str, expected: str) -> None:
    path = _write(tmp_path, f"model_client:\n  max_attempts: 1\n  timeout_seconds: {value}\n")
    with pytest.raises(ConfigurationError, match=r"model_client\.timeout_seconds") as raised:
        load_model_client_config(path)
    assert expected in str(raised.value)


@pytest.mark.parametrize("value", ['""', '"  "', '" http://x "', "1", "[]"])
def test_a_bad_base_url_is_refused(tmp_path: Path, value: str) -> None:
    path = _write(tmp_path, f"model_client:\n  max_attempts: 1\n  base_url: {value}\n")
    with pytest.raises(ConfigurationError, match=r"model_client\.base_url must be a non-blank URL"):
        load_model_client_config(path)


def test_yaml_that_does_not_parse_is_a_configuration_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "model_client: [unclosed\n")
    with pytest.raises(ConfigurationError, match="not valid YAML") as raised:
        load_model_client_config(path)
    assert isinstance(raised.value.__cause__, yaml.YAMLError)


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_model_client_config(tmp_path / "absent.yaml")


def test_configuration_error_is_a_harness_value_error() -> None:
    assert issubclass(ConfigurationError, HarnessError)
    assert issubclass(ConfigurationError, ValueError)


def test_missing_pyyaml_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now fails as if not installed
    with pytest.raises(ImportError, match=r"pip install 'diagnosis-harness\[config\]'") as raised:
        load_model_client_config(APPLICATION_YAML)
    assert isinstance(raised.value.__cause__, ModuleNotFoundError)


def test_from_document_takes_an_already_parsed_configuration() -> None:
    config = ModelClientConfig.from_document({"model_client": {"max_attempts": 1}})
    assert config == ModelClientConfig()
    with pytest.raises(ConfigurationError, match=r"^settings\.toml: model_client\.max_attempts"):
        ModelClientConfig.from_document(
            {"model_client": {"max_attempts": 2}}, source="settings.toml"
        )


def test_the_dataclass_refuses_what_the_file_refuses() -> None:
    assert ModelClientConfig(timeout_seconds=30).timeout_seconds == 30.0
    with pytest.raises(ConfigurationError, match=WHY):
        ModelClientConfig(max_attempts=3)
    with pytest.raises(ConfigurationError, match="must be the integer 1"):
        ModelClientConfig(max_attempts=True)
    with pytest.raises(ConfigurationError, match="timeout_seconds"):
        ModelClientConfig(timeout_seconds=0)
    with pytest.raises(ConfigurationError, match="max_attempts must be 1"):
        dataclasses.replace(ModelClientConfig(), max_attempts=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ModelClientConfig().max_attempts = 2  # type: ignore[misc]
