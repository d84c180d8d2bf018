"""Requirement: Spring AI hidden retry SHALL be disabled.

The scenario is about the repository's ``config/application.yaml``. A wheel ships a copy of it
(``conformance/_data/application.yaml``, see :mod:`diagnosis_harness.conformance._bundle`); in a
checkout the file itself is read. The suite must run without PyYAML (it is the ``config`` extra),
so the file is read in one of two ways, and either way the test fails rather than guesses:

* **with PyYAML**: ``yaml.safe_load`` gives ``model_client.max_attempts`` as the integer 1,
  :func:`~diagnosis_harness.integrations.load_model_client_config` loads the file (SDK
  ``max_retries`` 0), and refuses a copy of it that says ``max_attempts: 2``;
* **without PyYAML**: the top-level ``model_client:`` block is read line by line. Only a block
  mapping of plain ``key: value`` lines is accepted (flow style, nesting, anchors or a second
  ``model_client:`` fail the test), its ``max_attempts`` must be written ``1``, and the loader's
  own validation (:meth:`ModelClientConfig.from_document`) accepts that value and refuses 2.
"""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.conformance._bundle import locate_config
from diagnosis_harness.integrations import (
    ConfigurationError,
    ModelClientConfig,
    load_model_client_config,
)

from ._support import HIDDEN_RETRY

if TYPE_CHECKING:
    from pathlib import Path

HAVE_PYYAML = importlib.util.find_spec("yaml") is not None

_SECTION = re.compile(r"^model_client:[ ]*(?:#.*)?$")
_ENTRY = re.compile(
    r"^(?P<indent>[ ]+)(?P<key>[A-Za-z_][A-Za-z0-9_]*):[ ]+(?P<value>[^#\s]+)[ ]*(?:#.*)?$"
)
_MAX_ATTEMPTS = re.compile(r"^(?P<head>[ ]+max_attempts:[ ]+)1(?P<tail>[ ]*(?:#.*)?)$", re.M)


def _model_client_lines(text: str) -> dict[str, str]:
    """The ``key: value`` lines of the one top-level ``model_client:`` block, values verbatim."""
    lines = text.splitlines()
    starts = [n for n, line in enumerate(lines) if _SECTION.match(line)]
    assert len(starts) == 1, f"expected one top-level 'model_client:' line, found {len(starts)}"
    entries: dict[str, str] = {}
    indent: str | None = None
    for line in lines[starts[0] + 1 :]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            break  # the next top-level section
        entry = _ENTRY.match(line)
        assert entry is not None, f"not a plain 'key: value' line in model_client: {line!r}"
        indent = entry["indent"] if indent is None else indent
        assert entry["indent"] == indent, f"nested or misaligned line in model_client: {line!r}"
        assert entry["key"] not in entries, f"model_client.{entry['key']} is set twice"
        entries[entry["key"]] = entry["value"]
    return entries


@pytest.mark.spec(HIDDEN_RETRY, "Retry configuration is loaded")
def test_retry_configuration_is_loaded(tmp_path: Path) -> None:
    path = locate_config().path
    text = path.read_text(encoding="utf-8")

    # Read without a YAML parser: the file says `max_attempts: 1` in its model_client block.
    entries = _model_client_lines(text)
    assert entries.get("max_attempts") == "1", entries
    # The loader's own validation accepts that value and refuses any other count.
    config = ModelClientConfig.from_document({"model_client": {"max_attempts": 1}})
    assert (config.max_attempts, config.sdk_max_retries) == (1, 0)
    with pytest.raises(ConfigurationError, match=r"max_attempts must be 1, got 2"):
        ModelClientConfig.from_document({"model_client": {"max_attempts": 2}}, source=str(path))

    if not HAVE_PYYAML:
        return  # the `config` extra is not installed: the line reading above is the check
    import yaml  # noqa: PLC0415 - PyYAML is optional here

    raw = yaml.safe_load(text)
    assert raw["model_client"]["max_attempts"] == 1
    assert type(raw["model_client"]["max_attempts"]) is int

    loaded = load_model_client_config(path)
    assert loaded.max_attempts == 1
    assert loaded.sdk_max_retries == 0

    # The same file saying 2 is refused by the loader.
    two, replaced = _MAX_ATTEMPTS.subn(r"\g<head>2\g<tail>", text)
    assert replaced == 1
    copy = tmp_path / "application.yaml"
    copy.write_text(two, encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"model_client\.max_attempts must be 1, got 2"):
        load_model_client_config(copy)
