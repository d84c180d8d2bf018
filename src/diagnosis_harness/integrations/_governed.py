"""One governed model call, for any SDK: the engine under the openai and anthropic wrappers.

A governed call is one execution of :class:`~diagnosis_harness.HarnessRetryExecutor` under the
wrapper's policy; the executor gates every attempt and records it. Each attempt:

1. reserves one Model call (``ctx.reserve_model_call()``: the gate and the reservation in one
   decision) -- a refusal reserves nothing and sends nothing;
2. sends one request (the SDK's retries are off) whose timeout is the client's own, each part cut
   to the time the run's clock has left before the deadline;
3. records the response's actual token usage on the run (a streamed one when the stream reports
   it, at its end);
4. on a failure, asks the gate again, so that a run that ended meanwhile (cancelled, or past its
   deadline) ends the call with its ``RunTerminated`` rather than the SDK's error.

Cancellation and the deadline are prompt in both worlds. In asyncio every await of the SDK runs
in ``ctx.scope()``, so a cancellation of the run, or its deadline, cancels the request itself. A
blocking SDK call cannot be interrupted from another thread, so the sync wrappers run it on a
worker thread and the caller waits on a relay that the run's cancellation wakes, and whose every
wait ends at the run's deadline: the caller gets the run's ``RunCancelled`` / ``RunTimedOut`` at
once, whatever the provider does -- silent, or keeping a stalled stream alive with pings, each
of which restarts the SDK's read timeout. The abandoned worker is let go: a stream it reads is
closed (by the cancellation, or when the caller stops), so it ends at the provider's next byte,
and a request it waits for ends at its timeout (cut to the deadline when it was sent); if that
request still completes, the worker records its usage -- the tokens were spent -- and its answer
is dropped.
"""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, final

from .._boundary import Boundary
from .._context import RunContext
from .._errors import HarnessError
from .._retry import HarnessRetryExecutor
from .._retry_policy import RetryPolicy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
    from types import TracebackType

    from .._retry import Classifier
    from ._chat import ChatResponse, Server
    from .otel import HarnessTracing

__all__ = [
    "AsyncGovernedStream",
    "Governance",
    "GovernedCall",
    "GovernedStream",
    "TokenUsage",
    "UsageMeter",
    "UsageNotReported",
]

R = TypeVar("R")
C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)


@final
@dataclass(frozen=True, slots=True)
class TokenUsage:
    """The tokens one response used, as the provider reported them and as the run recorded them."""

    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@final
class UsageNotReported(HarnessError):
    """The provider answered without token usage, so the run's token budget cannot count it.

    Raised by a governed call whose response has no usage, and at the end of a governed stream
    that ended without reporting it (an OpenAI-compatible server that ignores
    ``stream_options.include_usage``). Inside an attempt it is not retried (its kind is
    ``UNKNOWN``): the request was answered, and asking again would spend twice. ``response`` is
    the answer that came without usage (``None`` for a stream, whose chunks were delivered).
    """

    def __init__(self, message: str, response: object = None) -> None:
        super().__init__(message)
        self.response = response


class UsageMeter(Protocol[C_contra]):
    """Reads a stream's chunks as they pass; knows the usage once the provider has reported it."""

    def observe(self, chunk: C_contra, /) -> None: ...

    @property
    def final(self) -> bool:
        """Whether the provider has reported the response's whole usage."""
        ...

    def usage(self) -> TokenUsage | None:
        """The usage known so far (the whole of it once :attr:`final`), or ``None``."""
        ...


def _positive_seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


@final
class Governance:
    """What every governed call of one wrapper shares: the run, its executor, the policy.

    Validated once, when the wrapper is built, so a bad argument is an error before any request.
    """

    __slots__ = (
        "ctx",
        "executor",
        "policy",
        "provider",
        "request_timeout",
        "response_of",
        "server",
        "tracing",
    )

    def __init__(
        self,
        ctx: RunContext,
        *,
        policy: str | RetryPolicy,
        executor: HarnessRetryExecutor | None,
        request_timeout: float | None,
        classifier: Classifier,
        tracing: HarnessTracing | None = None,
        provider: str = "",
        server: Server | None = None,
        response_of: Callable[[Any], ChatResponse | None] | None = None,
    ) -> None:
        if type(ctx) is not RunContext:
            raise TypeError(f"ctx must be a RunContext, got {ctx!r}")
        if isinstance(policy, str):
            policy = ctx.retry_policies[policy]  # KeyError naming the run's policies
        elif type(policy) is not RetryPolicy:
            raise TypeError(
                f"policy must be the name of one of the run's retry policies or a RetryPolicy, "
                f"got {policy!r}"
            )
        if executor is None:
            executor = HarnessRetryExecutor(ctx, classifier=classifier)
        elif type(executor) is not HarnessRetryExecutor:
            raise TypeError(f"executor must be a HarnessRetryExecutor or None, got {executor!r}")
        self.ctx = ctx
        self.policy = policy
        self.executor = executor
        self.request_timeout = _positive_seconds("request_timeout", request_timeout)
        if tracing is not None:  # OpenTelemetry is imported only when tracing is asked for
            from .otel import check_tracing  # noqa: PLC0415 - lazy: the optional `otel` extra

            check_tracing(tracing)
        self.tracing = tracing
        self.provider = provider  # gen_ai.provider.name of the chat spans
        self.server = server  # server.address and server.port of the chat spans
        self.response_of = response_of  # gen_ai.response.* of the chat spans

    def timeout(self, client_timeout: object) -> object:
        """The request's ``timeout=``: the client's (or ``request_timeout``), cut to the deadline.

        An ``httpx`` ``Timeout`` (the SDKs' default: 5 s to connect, 600 s for the rest) keeps its
        shape, each part cut; a number or ``None`` becomes a number.
        """
        left = self.ctx.deadline.remaining_seconds(self.ctx.clock)
        if self.request_timeout is not None:
            return min(self.request_timeout, left)
        if isinstance(client_timeout, (int, float)) and not isinstance(client_timeout, bool):
            return min(float(client_timeout), left)
        parts = ("connect", "read", "write", "pool")
        if client_timeout is not None and all(hasattr(client_timeout, p) for p in parts):

            def cut(part: str) -> float:
                value = getattr(client_timeout, part)
                return left if value is None else min(float(value), left)

            return type(client_timeout)(**{part: cut(part) for part in parts})
        return left

    def ended_wins(self) -> None:
        """After a failure: if the run ended meanwhile, raise its ``RunTerminated`` instead."""
        self.ctx.check(Boundary.MODEL)

    def record(self, usage: TokenUsage) -> None:
        self.ctx.record_token_usage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
        )


@final
@dataclass(frozen=True, slots=True)
class GovernedCall:
    """One governed call as its wrapper prepared it, and the steps its attempts share.

    ``send(timeout)`` sends one request with the call's checked parameters: it returns the SDK's
    answer (a sync client) or the awaitable of it (an async client). ``client_timeout`` is the
    client's own timeout, ``name`` names the call in errors (``"openai chat.completions.create"``)
    and ``model`` is the request's model, for the spans. The sync and the async world differ only
    in how ``send`` is waited for -- on a worker thread whose wait the run's cancellation ends
    (:func:`call`, :func:`open_stream`), or awaited in ``ctx.scope()`` (:func:`call_async`,
    :func:`open_stream_async`); the steps around it are these methods, shared.
    """

    gov: Governance
    send: Callable[[object], Any]
    client_timeout: object
    name: str
    model: object

    def begin(self) -> object:
        """Reserve the attempt's Model call (a refusal sends nothing); return its timeout."""
        self.gov.ctx.reserve_model_call()
        return self.gov.timeout(self.client_timeout)

    async def send_in_scope(self, timeout: object) -> Any:
        """``await send(timeout)`` in ``ctx.scope()``; after a failure, the run's ending wins."""
        try:
            async with self.gov.ctx.scope(Boundary.MODEL):
                return await self.send(timeout)
        except Exception:
            self.gov.ended_wins()
            raise

    def usage(self, response: R, usage_of: Callable[[R], TokenUsage | None]) -> TokenUsage:
        """The usage ``response`` reports; :class:`UsageNotReported` if it reports none."""
        usage = usage_of(response)
        if usage is None:
            raise UsageNotReported(f"{self.name}: the response reports no token usage", response)
        return usage

    def run(self, attempt: Callable[[], R], usage_of: Callable[[R], TokenUsage | None] | None) -> R:
        """``attempt`` under the executor and the policy; in a ``chat`` span each, when tracing."""
        gov = self.gov
        if gov.tracing is not None:
            attempt = gov.tracing.chat_attempts(
                attempt,
                provider=gov.provider,
                model=str(self.model),
                classify=gov.executor.classify,
                usage_of=usage_of,
                response_of=gov.response_of,
                server=gov.server,
            )
        return gov.executor.execute(gov.policy, attempt)

    async def run_async(
        self,
        attempt: Callable[[], Awaitable[R]],
        usage_of: Callable[[R], TokenUsage | None] | None,
    ) -> R:
        """:meth:`run` for an async attempt."""
        gov = self.gov
        if gov.tracing is not None:
            attempt = gov.tracing.chat_attempts_async(
                attempt,
                provider=gov.provider,
                model=str(self.model),
                classify=gov.executor.classify,
                usage_of=usage_of,
                response_of=gov.response_of,
                server=gov.server,
            )
        return await gov.executor.execute_async(gov.policy, attempt)


# -- sync: a worker thread and a relay the run's cancellation wakes -----------------------------


@final
class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


_END = object()  # the worker's last item
_OPENED = object()  # a stream's request was answered: its chunks follow
_WOKEN = object()  # put by the run's cancellation; also what a wait that reached the deadline gets
_RECORDING = object()  # the worker records the usage next: the answer is in, a wake-up is late


@final
class _Relay:
    """Items from one worker thread to the caller, in order; the run's cancellation wakes it.

    The queue is what both threads pass items through; ``_stopped`` tells the worker the caller
    no longer reads (it was woken, or closed a stream), so the worker stops reading the SDK. Each
    wait of the caller ends at the run's deadline, read on the run's clock (a wait that ends
    before the clock says so waits again for what is left, as ``ctx.scope()``'s timer does).

    A worker reading a stream hands over how to close it (:meth:`hold`); the run's cancellation
    and the caller's :meth:`stop` close it, once, under ``_source_lock``: a worker blocked on a
    provider that keeps the stream alive with pings would otherwise read on after the caller left.
    """

    __slots__ = (
        "_close_source",
        "_ctx",
        "_ended",
        "_queue",
        "_recording",
        "_registration",
        "_source_closed",
        "_source_lock",
        "_stopped",
    )

    def __init__(self, ctx: RunContext, work: Callable[[_Relay], None], name: str) -> None:
        self._ctx = ctx
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._ended = False  # the caller has taken _END: nothing follows (caller's thread only)
        # The caller has taken _RECORDING: recording the usage may end the run (a token limit),
        # whose cancellation wakes the relay, but the answer is complete (caller's thread only).
        self._recording = False
        self._source_lock = threading.Lock()
        self._close_source: Callable[[], object] | None = None  # the SDK stream's close
        self._source_closed = False  # the caller left: a stream opened from now on is closed
        self._registration = ctx.cancellation.register(self._on_cancel)
        # A daemon: an abandoned request must not keep the interpreter alive past its timeout.
        threading.Thread(target=work, args=(self,), name=name, daemon=True).start()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def put(self, item: object) -> None:
        self._queue.put(item)

    def hold(self, close: Callable[[], object]) -> None:
        """On the worker: the SDK's stream is open, and ``close`` closes it when the caller leaves.

        Closed at once if the caller has left already (it was woken before the stream opened).
        """
        with self._source_lock:
            if not self._source_closed:
                self._close_source = close
                return
        close()

    def get(self) -> object:
        """The next item; the run's ``RunTerminated`` if the run ended meanwhile.

        Ended means cancelled (the cancellation wakes the wait) or past the deadline (the wait
        ends there): either way the relay stops and the run's ending is raised, unless the answer
        is complete (the worker is recording its usage).
        """
        if self._ended:
            return _END
        item = self._take()
        while item is _WOKEN or item is _RECORDING:
            if item is _RECORDING:
                self._recording = True
            elif not self._recording:
                self.stop()
                self._ctx.check(Boundary.MODEL)  # raises: the run has ended
            item = self._take()
        if item is _END:
            self._ended = True
            self._registration.unregister()
        return item

    def _take(self) -> object:
        """The next item on the queue; ``_WOKEN`` once the run's clock has reached the deadline.

        An item already there is taken even past the deadline: the caller's checks decide on it.
        Once the answer is complete (``_RECORDING`` taken), the wait is the worker's recording.
        """
        if self._recording:
            return self._queue.get()
        deadline, clock = self._ctx.deadline, self._ctx.clock
        while True:
            try:
                return self._queue.get(timeout=deadline.remaining_seconds(clock))
            except queue.Empty:
                if deadline.expired(clock):
                    return _WOKEN

    def stop(self) -> None:
        """The caller leaves: the worker stops reading, and a stream it reads is closed."""
        self._stopped.set()
        self._registration.unregister()
        self._close()

    def _on_cancel(self, _reason: object) -> None:
        # On the cancelling thread: wake the caller, and free a worker blocked on the provider.
        # A stream the worker closed itself (it read it to the end) is closed again: a no-op.
        self._queue.put(_WOKEN)
        self._close()

    def _close(self) -> None:
        with self._source_lock:
            close, self._close_source = self._close_source, None
            self._source_closed = True
        if close is not None:
            close()


def _answered(gov: Governance, relay: _Relay) -> object:
    """The worker's first item, once the request is answered; raised, if it is a failure.

    A failure (the SDK's, or the run's ending while the caller waited) stops the relay, and the
    run's ending wins over the SDK's error.
    """
    try:
        item = relay.get()
        if isinstance(item, _Failed):
            raise item.error
    except Exception:
        relay.stop()
        gov.ended_wins()
        raise
    return item


def call(prepared: GovernedCall, usage_of: Callable[[R], TokenUsage | None]) -> R:
    """One governed call: ``send(timeout)`` per attempt, on a worker, under the executor."""
    gov = prepared.gov

    def attempt() -> R:
        timeout = prepared.begin()

        def work(relay: _Relay) -> None:
            try:
                response = prepared.send(timeout)
                usage = prepared.usage(response, usage_of)
            except Exception as error:  # handed to the caller, which raises it
                relay.put(_Failed(error))
            else:
                relay.put(_RECORDING)  # the call is answered: a cancellation now is too late
                gov.record(usage)  # by the worker: the tokens count even if the caller left
                relay.put(response)
            relay.put(_END)

        relay = _Relay(gov.ctx, work, prepared.name)
        try:
            return cast("R", _answered(gov, relay))  # the worker's one other item: the response
        finally:
            relay.stop()  # one item is all the caller takes

    return prepared.run(attempt, usage_of)


@final
class GovernedStream(Generic[C]):
    """The chunks of one governed streaming call; iterate it, or use it as a context manager.

    The request was sent and answered (under the executor) when this was returned; the chunks
    are read on a worker thread and handed over in order. A run that ends meanwhile (cancelled,
    or another call exhausted its budget) ends the iteration with its ``RunTerminated`` at once,
    even while the provider is silent; so does the deadline, even while the provider keeps the
    stream alive without content (pings); and either closes the SDK's stream. The usage is
    recorded when the provider reports it; a stream that ends without it raises
    :class:`UsageNotReported` after its last chunk. A stream closed early records the usage
    known so far (Anthropic reports input tokens first; OpenAI nothing before the end).
    Errors while streaming are not retried: the chunks before them were delivered.

    Read it to the end or close it (``with``): until then it holds a callback on the run's
    cancellation, and its worker keeps reading the provider's answer.
    """

    __slots__ = ("_gov", "_relay", "_usage")

    def __init__(self, gov: Governance, relay: _Relay, usage: list[TokenUsage]) -> None:
        self._gov = gov
        self._relay = relay
        self._usage = usage  # written once by the worker, before it puts _END

    @property
    def usage(self) -> TokenUsage | None:
        """The usage recorded for this stream, once it is known; else ``None``."""
        return self._usage[0] if self._usage else None

    def __iter__(self) -> Iterator[C]:
        return self

    def __next__(self) -> C:
        if self._relay.stopped:  # closed, failed or cancelled: the run's ending, or the end
            self._gov.ended_wins()
            raise StopIteration
        try:
            item = self._relay.get()
        except BaseException:
            self._relay.stop()
            raise
        if item is _END:
            raise StopIteration
        if isinstance(item, _Failed):
            self._relay.stop()
            self._gov.ended_wins()
            raise item.error
        ctx = self._gov.ctx
        # The deadline, read per chunk; a cancellation (any ending but this stream's own usage
        # record, which follows its last chunk) wakes the relay instead.
        if ctx.deadline.expired(ctx.clock):
            self._relay.stop()
            ctx.check(Boundary.MODEL)
        return cast("C", item)  # anything else on the relay is a chunk

    def close(self) -> None:
        """Stop reading: the SDK's stream is closed, and the worker ends at its next read."""
        self._relay.stop()

    def __enter__(self) -> GovernedStream[C]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_stream(prepared: GovernedCall, meter: Callable[[], UsageMeter[C]]) -> GovernedStream[C]:
    """One governed streaming call: ``send(timeout)`` per attempt, under the executor."""
    gov = prepared.gov

    def attempt() -> GovernedStream[C]:
        timeout = prepared.begin()
        usage: list[TokenUsage] = []

        def work(relay: _Relay) -> None:
            try:
                stream = prepared.send(timeout)
            except Exception as error:
                relay.put(_Failed(error))
                relay.put(_END)
                return
            relay.put(_OPENED)
            relay.hold(stream.close)
            _pump(gov, stream, meter(), relay, usage=usage, name=prepared.name)

        relay = _Relay(gov.ctx, work, prepared.name)
        _answered(gov, relay)  # _OPENED: the chunks follow, on the same relay
        return GovernedStream(gov, relay, usage)

    return prepared.run(attempt, None)


def _pump(
    gov: Governance,
    stream: Any,
    meter: UsageMeter[C],
    relay: _Relay,
    *,
    usage: list[TokenUsage],
    name: str,
) -> None:
    """On the worker: chunks to the relay, then the usage recorded, then the end."""
    complete = False
    failure: Exception | None = None
    try:
        for chunk in stream:
            meter.observe(chunk)
            relay.put(chunk)
            if relay.stopped:
                break
        else:
            complete = True
    except Exception as error:  # handed to the caller after the usage is recorded
        failure = error
    finally:
        stream.close()
    known = meter.usage()
    relay.put(_RECORDING)
    if known is not None:
        gov.record(known)
        usage.append(known)
    if failure is not None:
        relay.put(_Failed(failure))
    elif complete and not meter.final:
        relay.put(_Failed(UsageNotReported(f"{name}: the stream ended without token usage")))
    relay.put(_END)


# -- async: every await of the SDK in ctx.scope() -------------------------------------------------


async def call_async(prepared: GovernedCall, usage_of: Callable[[R], TokenUsage | None]) -> R:
    """One governed call in asyncio: ``await send(timeout)`` per attempt, under the executor."""

    async def attempt() -> R:
        timeout = prepared.begin()
        response: R = await prepared.send_in_scope(timeout)
        prepared.gov.record(prepared.usage(response, usage_of))
        return response

    return await prepared.run_async(attempt, usage_of)


@final
class AsyncGovernedStream(Generic[C]):
    """The chunks of one governed streaming call in asyncio: ``async for``, or ``async with``.

    Like :class:`GovernedStream`: each chunk is awaited in ``ctx.scope()``, so the run's
    cancellation or deadline ends a silent stream at once with the run's ``RunTerminated``; the
    usage is recorded when reported, :class:`UsageNotReported` raised at an end without it, and
    what is known recorded when the stream is closed early.
    """

    __slots__ = ("_done", "_gov", "_iterator", "_meter", "_name", "_stream", "_usage")

    def __init__(self, gov: Governance, stream: Any, meter: UsageMeter[C], name: str) -> None:
        self._gov = gov
        self._stream = stream
        self._iterator: AsyncIterator[C] = stream.__aiter__()
        self._meter = meter
        self._name = name
        self._usage: TokenUsage | None = None
        self._done = False

    @property
    def usage(self) -> TokenUsage | None:
        """The usage recorded for this stream, once it is known; else ``None``."""
        return self._usage

    def __aiter__(self) -> AsyncIterator[C]:
        return self

    async def __anext__(self) -> C:
        if self._done:
            raise StopAsyncIteration
        try:
            async with self._gov.ctx.scope(Boundary.MODEL):
                chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            await self._finish()
            if not self._meter.final:
                raise UsageNotReported(
                    f"{self._name}: the stream ended without token usage"
                ) from None
            raise
        except Exception:
            await self._finish()
            self._gov.ended_wins()
            raise
        self._meter.observe(chunk)
        return chunk

    async def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        await self._stream.close()
        self._usage = self._meter.usage()
        if self._usage is not None:
            self._gov.record(self._usage)

    async def aclose(self) -> None:
        """Stop reading and close the SDK's stream; the usage known so far is recorded."""
        await self._finish()

    async def __aenter__(self) -> AsyncGovernedStream[C]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def open_stream_async(
    prepared: GovernedCall, meter: Callable[[], UsageMeter[C]]
) -> AsyncGovernedStream[C]:
    """One governed streaming call in asyncio: ``await send(timeout)`` per attempt."""

    async def attempt() -> AsyncGovernedStream[C]:
        timeout = prepared.begin()
        stream = await prepared.send_in_scope(timeout)
        return AsyncGovernedStream(prepared.gov, stream, meter(), prepared.name)

    return await prepared.run_async(attempt, None)
