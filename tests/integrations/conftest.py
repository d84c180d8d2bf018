"""Fixtures of the integration tests: the loopback model provider (see ``loopback.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .loopback import LoopbackServer, serve

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
