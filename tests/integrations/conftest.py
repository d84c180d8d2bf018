"""Fixtures of the integration tests: the loopback model provider (see ``loopback.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .loopback import LoopbackServer, serve
from .stall_table import RESULTS, table

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def direct_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDKs' HTTP clients honour proxy variables; requests to 127.0.0.1 must go direct."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def loopback(direct_connections: None) -> Iterator[LoopbackServer]:
    """A scripted OpenAI/Anthropic provider on 127.0.0.1, stopped (stalls released) after."""
    with serve() as server:
        yield server


# -- the stall matrix's table (test_stall_matrix.py, stall_table.py) ------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stall-table",
        action="store_true",
        help="print the stall matrix's figures as the Markdown table docs/guides/stalls.md shows",
    )


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    results = config.stash.get(RESULTS, None)
    if config.getoption("--stall-table", default=False) and results:
        terminalreporter.section("stall matrix: when each run ended, after its deadline or cancel")
        terminalreporter.write_line(table(results))
