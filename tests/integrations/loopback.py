"""A model provider on 127.0.0.1 for the tests: the OpenAI and Anthropic wire formats, scripted.

The real ``openai`` and ``anthropic`` clients (and the frameworks built on them) talk to it over
real HTTP, so a test sees every request they actually send. It speaks

- OpenAI Chat Completions, ``POST /v1/chat/completions``: a JSON ``chat.completion``, or with
  ``"stream": true`` server-sent ``chat.completion.chunk`` events ending in ``data: [DONE]``,
  preceded by a usage-only chunk (``"choices": []``) when the request asks for
  ``stream_options.include_usage``;
- Anthropic Messages, ``POST /v1/messages``: a JSON ``message``, or with ``"stream": true`` the
  events ``message_start`` (input usage), ``content_block_start`` / ``content_block_delta`` /
  ``content_block_stop``, ``message_delta`` (stop reason and output usage) and ``message_stop``.

Each request takes the next scripted :class:`Reply` (the default reply once the script is empty):
answer text, tool calls, usage numbers, an HTTP status (``Retry-After`` on a 429), and a stall --
the handler holds the response until the test sets a ``threading.Event`` it owns. Nothing here
sleeps. The server records every request it received (:attr:`LoopbackServer.requests`), so a
test asserts that the provider saw exactly the attempts the harness recorded.

Use it through the ``loopback`` fixture (``tests/integrations/conftest.py``), or :func:`serve`.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

__all__ = [
    "ANSWER",
    "ANTHROPIC_PATH",
    "OPENAI_PATH",
    "LoopbackServer",
    "Reply",
    "SeenRequest",
    "ToolCall",
    "serve",
]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
ANSWER = "root cause: disk full"

# A stalled handler waits this long at most for its Event: a test that forgets to release one
# still ends (the fixture releases every stall at teardown, so this is never reached normally).
_STALL_LIMIT_S = 60.0


@final
@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asks for: OpenAI ``tool_calls`` / Anthropic ``tool_use`` blocks."""

    name: str
    arguments: Mapping[str, object] = field(default_factory=dict)
    id: str = "call_1"


@final
@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answers to one request.

    ``status`` other than 200 answers a provider error body (with ``Retry-After: retry_after`` on
    a 429 when given). ``usage=False`` leaves usage out: no ``usage`` in a JSON answer, no usage
    chunk in an OpenAI stream even when asked for, no usage in Anthropic's ``message_delta``.
    ``stall`` holds the answer until the Event is set: before the status line when
    ``stall_after_events`` is ``None``, else after that many events of a stream (its headers and
    first events are sent, then it stalls). ``ping_every`` (seconds) keeps a stream stalled mid-way
    alive as providers do: a ping while it stalls (Anthropic's ``ping`` event, an SSE comment
    for OpenAI), which the SDKs read and skip -- each one restarts the client's read timeout, so
    only the run's deadline can end the stall. ``chunks`` is how many pieces a streamed text is cut
    into. ``cache_read_tokens`` are prompt tokens read from the cache, on top of
    ``input_tokens``: Anthropic's ``cache_read_input_tokens`` (reported apart from
    ``input_tokens``), OpenAI's ``prompt_tokens_details.cached_tokens`` (counted inside
    ``prompt_tokens``, which is then their sum; the details only when there are some).
    ``model`` is the model the answer names (the requested one by default; a provider may answer
    with a dated snapshot), ``id`` the answer's ID (``chatcmpl-loopback`` / ``msg_loopback`` by
    default). ``within_max_tokens`` answers at most the output tokens the request allows (its
    ``max_completion_tokens`` or ``max_tokens``), as a real model stops there.
    """

    text: str = ANSWER
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int = 12
    output_tokens: int = 5
    cache_read_tokens: int = 0
    usage: bool = True
    status: int = 200
    retry_after: float | None = None
    stall: threading.Event | None = None
    stall_after_events: int | None = None
    ping_every: float | None = None
    chunks: int = 3
    model: str | None = None
    id: str | None = None
    within_max_tokens: bool = False


@final
@dataclass(frozen=True, slots=True)
class SeenRequest:
    """One request as the server received it."""

    path: str
    body: Mapping[str, Any]
    headers: Mapping[str, str]

    @property
    def streamed(self) -> bool:
        return self.body.get("stream") is True


@final
class LoopbackServer(ThreadingHTTPServer):
    """The server; every public method is thread-safe. Start it with :func:`serve`."""

    daemon_threads = True

    def __init__(self, on_request: Callable[[SeenRequest], None] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self._changed = threading.Condition()  # protects everything below; notified on change
        self._script: deque[Reply] = deque()
        self._seen: list[SeenRequest] = []
        self._stalled = 0
        self._held = 0
        self._stalls: list[threading.Event] = []
        self.default = Reply()
        self.on_request = on_request

    # -- addresses ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the Anthropic client's ``base_url``."""
        return f"http://127.0.0.1:{self.server_port}"

    @property
    def openai_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the OpenAI client's ``base_url``."""
        return f"{self.url}/v1"

    # -- scripting and reading --------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order; after them, :attr:`default`."""
        with self._changed:
            self._script.extend(replies)

    @property
    def requests(self) -> tuple[SeenRequest, ...]:
        """Every request received so far, in arrival order."""
        with self._changed:
            return tuple(self._seen)

    @property
    def count(self) -> int:
        """How many requests the server has received."""
        with self._changed:
            return len(self._seen)

    @property
    def stalled(self) -> int:
        """How many handlers are holding their answer right now."""
        with self._changed:
            return self._stalled

    @property
    def held(self) -> int:
        """How many handlers have held their answer so far, released since or not."""
        with self._changed:
            return self._held

    def wait_for_stalled(self, n: int = 1, timeout: float = 10.0) -> None:
        """Block until ``n`` handlers hold their answer; ``AssertionError`` after ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._stalled >= n, timeout):
                raise AssertionError(f"{self._stalled} stalled request(s) after {timeout} s")

    def release_all(self) -> None:
        """Set every stall Event a reply has used, so no handler is left holding."""
        with self._changed:
            stalls = list(self._stalls)
        for event in stalls:
            event.set()

    # -- for the handler ----------------------------------------------------------------------

    def _receive(self, seen: SeenRequest) -> Reply:
        with self._changed:
            self._seen.append(seen)
            reply = self._script.popleft() if self._script else self.default
            if reply.stall is not None:
                self._stalls.append(reply.stall)
            self._changed.notify_all()
        if self.on_request is not None:
            self.on_request(seen)
        return reply

    def _hold(
        self,
        stall: threading.Event,
        ping: Callable[[], None] | None = None,
        every: float | None = None,
    ) -> None:
        with self._changed:
            self._stalled += 1
            self._held += 1
            self._changed.notify_all()
        try:
            if ping is None or every is None:
                stall.wait(_STALL_LIMIT_S)
            else:  # the provider's clock: a ping each ``every`` s of the stall, until released
                for _ in range(int(_STALL_LIMIT_S / every)):
                    if stall.wait(every):
                        break
                    ping()
        finally:
            with self._changed:
                self._stalled -= 1
                self._changed.notify_all()


@contextmanager
def serve(on_request: Callable[[SeenRequest], None] | None = None) -> Iterator[LoopbackServer]:
    """Run a :class:`LoopbackServer` on a thread for the block; release stalls, then stop it.

    ``on_request(seen)`` runs on the handler's thread as each request arrives, before any stall:
    a test advances a ``ManualClock`` there, standing for the time the provider took.
    """
    server = LoopbackServer(on_request)
    # A short poll interval: shutdown() waits for the loop's next poll (0.5 s by default).
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, name="loopback-provider"
    )
    thread.start()
    try:
        yield server
    finally:
        server.release_all()
        server.shutdown()
        thread.join()
        server.server_close()


# -- the wire formats ---------------------------------------------------------------------------


def _openai_usage(reply: Reply) -> dict[str, object]:
    prompt = reply.input_tokens + reply.cache_read_tokens
    usage: dict[str, object] = {
        "prompt_tokens": prompt,
        "completion_tokens": reply.output_tokens,
        "total_tokens": prompt + reply.output_tokens,
    }
    if reply.cache_read_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cache_read_tokens}
    return usage


def _openai_tool_calls(reply: Reply) -> list[dict[str, object]]:
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
        }
        for call in reply.tool_calls
    ]


def _finish_reason(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def _openai_completion(reply: Reply, model: str) -> dict[str, object]:
    message: dict[str, object] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = _openai_tool_calls(reply)
    body: dict[str, object] = {
        "id": reply.id or "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply)}],
    }
    if reply.usage:
        body["usage"] = _openai_usage(reply)
    return body


def _within_max_tokens(reply: Reply, body: Mapping[str, Any]) -> Reply:
    """``reply`` with no more output tokens than the request allows (if it names a limit)."""
    allowed = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(allowed, int) and allowed < reply.output_tokens:
        return replace(reply, output_tokens=allowed)
    return reply


def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _openai_events(reply: Reply, model: str, include_usage: bool) -> list[bytes]:
    def chunk(choices: list[object], **extra: object) -> bytes:
        body = {
            "id": "chatcmpl-loopback",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def delta(content: dict[str, object], finish: str | None = None) -> list[object]:
        return [{"index": 0, "delta": content, "finish_reason": finish}]

    events = [chunk(delta({"role": "assistant", "content": ""}))]
    events += [chunk(delta({"content": piece})) for piece in _pieces(reply.text, reply.chunks)]
    for index, call in enumerate(_openai_tool_calls(reply)):
        events.append(chunk(delta({"tool_calls": [{"index": index, **call}]})))
    events.append(chunk(delta({}, _finish_reason(reply))))
    if include_usage and reply.usage:
        events.append(chunk([], usage=_openai_usage(reply)))
    events.append(b"data: [DONE]\n\n")
    return events


def _anthropic_content(reply: Reply) -> list[dict[str, object]]:
    content: list[dict[str, object]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in reply.tool_calls
    ]
    return content


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def _anthropic_message(reply: Reply, model: str) -> dict[str, object]:
    body: dict[str, object] = {
        "id": reply.id or "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_content(reply),
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
    }
    if reply.usage:
        body["usage"] = _anthropic_usage(reply, reply.output_tokens)
    return body


def _anthropic_usage(reply: Reply, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": reply.input_tokens,
        "cache_read_input_tokens": reply.cache_read_tokens,
        "output_tokens": output_tokens,
    }


def _anthropic_events(reply: Reply, model: str) -> list[bytes]:
    def event(name: str, data: Mapping[str, object]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    start = _anthropic_message(reply, model) | {"content": [], "stop_reason": None}
    if reply.usage:
        start["usage"] = _anthropic_usage(reply, 1)
    events = [event("message_start", {"message": start})]
    index = 0
    if reply.text:
        block: dict[str, object] = {"type": "text", "text": ""}
        events.append(event("content_block_start", {"index": index, "content_block": block}))
        for piece in _pieces(reply.text, reply.chunks):
            text_delta = {"type": "text_delta", "text": piece}
            events.append(event("content_block_delta", {"index": index, "delta": text_delta}))
        events.append(event("content_block_stop", {"index": index}))
        index += 1
    for call in reply.tool_calls:
        tool_block: dict[str, object] = {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": {},
        }
        events.append(event("content_block_start", {"index": index, "content_block": tool_block}))
        json_delta = {"type": "input_json_delta", "partial_json": json.dumps(dict(call.arguments))}
        events.append(event("content_block_delta", {"index": index, "delta": json_delta}))
        events.append(event("content_block_stop", {"index": index}))
        index += 1
    message_delta: dict[str, object] = {
        "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None}
    }
    if reply.usage:
        message_delta["usage"] = {"output_tokens": reply.output_tokens}
    events.append(event("message_delta", message_delta))
    events.append(event("message_stop", {}))
    return events


_ANTHROPIC_PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def _error_body(path: str, status: int) -> dict[str, object]:
    message = f"loopback: scripted {status}"
    if path == ANTHROPIC_PATH:
        kind = "rate_limit_error" if status == 429 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": "server_error", "code": None}}


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw) if raw else {}
        seen = SeenRequest(self.path, body, {k.lower(): v for k, v in self.headers.items()})
        reply = self.server._receive(seen)
        if reply.stall is not None and reply.stall_after_events is None:
            self.server._hold(reply.stall)
        # The client may have given up (its timeout, a cancellation): nothing left to answer.
        with suppress(BrokenPipeError, ConnectionResetError):
            self._answer(seen, reply)

    def _answer(self, seen: SeenRequest, reply: Reply) -> None:
        model = reply.model or str(seen.body.get("model", "loopback-model"))
        if reply.within_max_tokens:
            reply = _within_max_tokens(reply, seen.body)
        if seen.path not in (OPENAI_PATH, ANTHROPIC_PATH):
            self._json(404, _error_body(seen.path, 404))
        elif reply.status != 200:
            headers = {}
            if reply.status == 429 and reply.retry_after is not None:
                headers["Retry-After"] = f"{reply.retry_after:g}"
            self._json(reply.status, _error_body(seen.path, reply.status), headers)
        elif not seen.streamed:
            answer = _openai_completion if seen.path == OPENAI_PATH else _anthropic_message
            self._json(200, answer(reply, model))
        else:
            if seen.path == OPENAI_PATH:
                options = seen.body.get("stream_options") or {}
                events = _openai_events(reply, model, options.get("include_usage") is True)
            else:
                events = _anthropic_events(reply, model)
            ping = b": ping\n\n" if seen.path == OPENAI_PATH else _ANTHROPIC_PING
            self._stream(events, reply, ping)

    def _json(self, status: int, body: object, headers: Mapping[str, str] | None = None) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, events: list[bytes], reply: Reply, ping: bytes) -> None:
        # HTTP/1.0: no length, the body ends when the connection closes after the last event.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for number, event in enumerate(events):
            if reply.stall is not None and number == reply.stall_after_events:
                self.wfile.flush()
                self.server._hold(reply.stall, lambda: self._ping(ping), reply.ping_every)
            self.wfile.write(event)
        self.wfile.flush()

    def _ping(self, ping: bytes) -> None:
        self.wfile.write(ping)
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on what the server saw."""
