"""What a ``chat`` span reports of a model call besides the harness's own facts: the server the
client talks to and the answer's model, ID and finish reasons (the GenAI semantic conventions'
``server.*`` and ``gen_ai.response.*``).

Plain data, read off the SDK's own client and response objects by the provider modules
(``_openai``, ``_anthropic``, ``openai_agents``). Standard library only.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import final

__all__ = ["ChatResponse", "Server", "server_of"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


@final
@dataclass(frozen=True, slots=True)
class Server:
    """The host and port a client sends its requests to (``server.address``, ``server.port``)."""

    address: str
    port: int


@final
@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A model's answer as the ``chat`` span reports it; ``None`` where the answer does not say."""

    model: str | None
    id: str | None
    finish_reasons: tuple[str, ...]


def server_of(base_url: object) -> Server | None:
    """The server of an SDK client's ``base_url`` (an ``httpx.URL``, or its text), or ``None``
    for a URL without a host. A URL without a port has its scheme's (443 for https)."""
    parts = urllib.parse.urlsplit(str(base_url))
    if not parts.hostname:
        return None
    port = parts.port if parts.port is not None else _DEFAULT_PORTS.get(parts.scheme)
    return None if port is None else Server(parts.hostname, port)
