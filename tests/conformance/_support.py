"""Constants and helpers of the conformance tests."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import jsonschema

from diagnosis_harness.conformance._bundle import suite_dir

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"  # CI keeps what the tests write here (screenshots) as artifacts
SCHEMA_PATH = ROOT / "docs" / "reference" / "conformance-report.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text("utf-8"))
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SPEC = ROOT / "specs" / "diagnosis-harness-run-context" / "spec.md"
SUITE = suite_dir()

SMALL_SPEC = """\
# toy Specification

## Purpose

A toy capability for the plugin's tests, with a purpose long enough for the validator to accept.

## Requirements

### Requirement: Things SHALL work

The system SHALL do things.

#### Scenario: First thing

- **WHEN** the first thing happens
- **THEN** it works

#### Scenario: Second thing

- **WHEN** the second thing happens
- **THEN** it works

#### Scenario: Third thing

- **WHEN** the third thing happens
- **THEN** it works

### Requirement: Other things SHALL work too

The system SHALL do other things.

#### Scenario: Fourth thing

- **WHEN** the fourth thing happens
- **THEN** it works

#### Scenario: Fifth thing

- **WHEN** the fifth thing happens
- **THEN** it works
"""
THINGS = "Things SHALL work"
OTHERS = "Other things SHALL work too"


def valid_report(document: dict[str, Any]) -> dict[str, Any]:
    """``document``, after checking it against the shipped JSON Schema (every error listed)."""
    errors = sorted(_VALIDATOR.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors
    )
    return document


def read_json(directory: Path) -> dict[str, Any]:
    """The ``conformance.json`` in ``directory``, validated against the schema."""
    data: dict[str, Any] = json.loads((directory / "conformance.json").read_text("utf-8"))
    return valid_report(data)


def scenarios(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every scenario of the report's one spec, by name."""
    return {
        scenario["name"]: scenario
        for requirement in report["items"][0]["requirements"]
        for scenario in requirement["scenarios"]
    }


# -- headless Chromium ---------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def chromium(home: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with a profile of its own under ``home``."""
    assert CHROMIUM is not None
    profile = home / f"profile-{len(list(home.glob('profile-*')))}"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config")}
    env["XDG_CACHE_HOME"] = str(home / "cache")
    done = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the inflated (still filtered) scanlines of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + length])
        at += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


def visible_text(home: Path, page: Path) -> str:
    """The text of ``page`` as Chromium lays it out before any click: ``document.body.innerText``
    (which leaves out what is hidden, such as the body of a closed ``<details>``), read from the
    DOM of a copy of the page with a one-line script added."""
    probe = home / f"probe-{page.name}"
    script = (
        "<script>document.body.setAttribute('data-visible-text', document.body.innerText)"
        "</script></body>"
    )
    probe.write_text(page.read_text("utf-8").replace("</body>", script), encoding="utf-8")
    dom = chromium(home, "--dump-dom", probe.as_uri()).stdout
    found = re.search(r'data-visible-text="([^"]*)"', dom)
    assert found is not None, dom[-2000:]
    return html.unescape(found.group(1))
