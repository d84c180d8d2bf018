"""The model client's section of the application configuration: one attempt per call, always.

Only :class:`~diagnosis_harness.HarnessRetryExecutor` retries, so every retry is an attempt the
run records and a policy bounds. An SDK client's own retries (``openai.OpenAI(max_retries=2)``,
``anthropic.Anthropic(max_retries=2)`` by default) would happen inside one attempt, unseen: a
single 500 becomes 3 requests, and under a policy of 2 attempts, 6. So ``model_client.max_attempts``
is 1 -- the SDK's ``max_retries`` is ``max_attempts - 1 == 0`` -- and any other value is refused
with that reason, in the file and in code alike.

The YAML file is read with PyYAML (the ``config`` extra), imported only by
:func:`load_model_client_config`; :meth:`ModelClientConfig.from_document` takes a document that is
already parsed and needs nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import final

from .._errors import HarnessError
from ._extras import missing_extra

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "ConfigurationError",
    "ModelClientConfig",
    "load_model_client_config",
]

DEFAULT_CONFIG_PATH = Path("config", "application.yaml")
"""Where :func:`load_model_client_config` looks by default, relative to the working directory."""

_SECTION = "model_client"
_DEFAULT_TIMEOUT = 60.0

_WHY_ONE_ATTEMPT = (
    "only HarnessRetryExecutor retries, so that every retry is a recorded attempt under the run's "
    "RetryPolicy; an SDK client's own retries (max_retries = max_attempts - 1) would multiply "
    "requests unseen (with the SDK default of 2, one 500 becomes 3 requests). "
    "Set retries in the RetryPolicy instead."
)


@final
class ConfigurationError(HarnessError, ValueError):
    """The application configuration is missing a setting or holds a value that is refused."""


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelClientConfig:
    """How SDK model clients are built: ``model_client`` in ``config/application.yaml``.

    ``max_attempts`` must be exactly 1 (an ``int``, not ``bool``): one request per call, retries
    only in the executor. ``timeout_seconds`` is each request's own timeout (the SDK's
    ``timeout=``), finite and > 0; the run's deadline still bounds the run. ``base_url`` is the
    provider endpoint, or ``None`` for the SDK's default (and its environment variable).
    Every refusal is a :class:`ConfigurationError` that names the setting.
    """

    max_attempts: int = 1
    timeout_seconds: float = _DEFAULT_TIMEOUT
    base_url: str | None = None

    def __post_init__(self) -> None:
        _, timeout, _ = _checked(self.max_attempts, self.timeout_seconds, self.base_url, _SECTION)
        object.__setattr__(self, "timeout_seconds", timeout)  # 30 -> 30.0

    @property
    def sdk_max_retries(self) -> int:
        """The SDK's ``max_retries`` for these attempts: ``max_attempts - 1``, so always 0."""
        return self.max_attempts - 1

    @classmethod
    def from_document(cls, document: object, *, source: str = "configuration") -> ModelClientConfig:
        """Read the ``model_client`` section of a parsed application configuration.

        ``document`` is the whole file as a mapping; other top-level sections are ignored. The
        section must exist and state ``max_attempts``; an unknown key in it is refused (a typo
        must not fall back to a default). Messages start with ``source``.
        """
        if not isinstance(document, Mapping):
            raise ConfigurationError(
                f"{source}: expected a mapping with a {_SECTION!r} section, "
                f"got {_describe(document)}"
            )
        section = document.get(_SECTION)
        if section is None:
            raise ConfigurationError(
                f"{source}: no {_SECTION!r} section; add '{_SECTION}: {{max_attempts: 1}}' "
                f"-- the SDK client's attempts must be stated, and they are 1: {_WHY_ONE_ATTEMPT}"
            )
        if not isinstance(section, Mapping):
            raise ConfigurationError(
                f"{source}: {_SECTION} must be a mapping, got {_describe(section)}"
            )
        known = [field.name for field in fields(cls)]
        unknown = sorted(repr(key) for key in section if key not in known)
        if unknown:
            raise ConfigurationError(
                f"{source}: unknown setting(s) in {_SECTION}: {', '.join(unknown)}; "
                f"known: {', '.join(known)}"
            )
        if "max_attempts" not in section:
            raise ConfigurationError(
                f"{source}: {_SECTION}.max_attempts is not set; it must be stated, and it must be "
                f"1: {_WHY_ONE_ATTEMPT}"
            )
        max_attempts, timeout, base_url = _checked(
            section["max_attempts"],
            section.get("timeout_seconds", _DEFAULT_TIMEOUT),
            section.get("base_url"),
            f"{source}: {_SECTION}",
        )
        return cls(max_attempts=max_attempts, timeout_seconds=timeout, base_url=base_url)


def _checked(
    max_attempts: object, timeout: object, base_url: object, where: str
) -> tuple[int, float, str | None]:
    """The three settings, checked in the order a reader fixes them; ``where`` prefixes names."""
    if type(max_attempts) is not int:
        raise ConfigurationError(
            f"{where}.max_attempts must be the integer 1, got {_describe(max_attempts)}: "
            f"{_WHY_ONE_ATTEMPT}"
        )
    if max_attempts != 1:
        raise ConfigurationError(
            f"{where}.max_attempts must be 1, got {max_attempts}: {_WHY_ONE_ATTEMPT}"
        )
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise ConfigurationError(
            f"{where}.timeout_seconds must be a number of seconds, got {_describe(timeout)}"
        )
    if not math.isfinite(timeout) or timeout <= 0:
        raise ConfigurationError(f"{where}.timeout_seconds must be finite and > 0, got {timeout!r}")
    if base_url is not None and (
        not isinstance(base_url, str) or not base_url.strip() or base_url != base_url.strip()
    ):
        raise ConfigurationError(
            f"{where}.base_url must be a non-blank URL without surrounding whitespace, or null "
            f"for the SDK's default, got {_describe(base_url)}"
        )
    return max_attempts, float(timeout), base_url


def load_model_client_config(
    path: str | os.PathLike[str] = DEFAULT_CONFIG_PATH,
) -> ModelClientConfig:
    """Parse the YAML application configuration at ``path`` and return its ``model_client``.

    Needs PyYAML (``pip install 'diagnosis-harness[config]'``), imported on the first call.
    Raises :class:`ConfigurationError` for YAML that does not parse and for every refused
    setting (see :meth:`ModelClientConfig.from_document`), ``OSError`` if the file cannot be read.
    """
    try:
        import yaml  # noqa: PLC0415 - lazy: PyYAML is the optional `config` extra
    except ModuleNotFoundError as error:
        if error.name != "yaml":
            raise
        raise missing_extra("yaml", "config", "load_model_client_config") from error
    source = os.fspath(path)
    with open(source, encoding="utf-8") as stream:
        try:
            document = yaml.safe_load(stream)
        except yaml.YAMLError as error:
            raise ConfigurationError(f"{source}: not valid YAML: {error}") from error
    return ModelClientConfig.from_document(document, source=source)
