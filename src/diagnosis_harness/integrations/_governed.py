"""The governed openai and anthropic clients' calls, sync and async, over one :class:`ModelCall`.

A governed call is one execution of :class:`~diagnosis_harness.HarnessRetryExecutor` under the
wrapper's policy; the executor gates every attempt and records it. Each attempt's steps are the
wrapper's :class:`~._model_call.ModelCall`'s, the same for every adapter:

1. reserve one Model call (the gate and the reservation in one decision) -- a refusal reserves
   nothing and sends nothing;
2. send one request (the SDK's retries are off) whose timeout is the client's own, each part cut
   to the time the run's clock has left before the deadline;
3. record the response's actual token usage on the attempt's reservation, once (a streamed one
   at its end, also when cut);
4. on a failure, ask the gate again, so that a run that ended meanwhile (cancelled, or past its
   deadline) ends the call with its ``RunTerminated`` rather than the SDK's error.

What this module adds is how each world waits for the SDK: the decisions above are not repeated
in it.

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

import queue
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, final

from .._boundary import Boundary
from ._model_call import (
    Chat,
    ModelCall,
    ModelRequest,
    ModelReservation,
    TokenUsage,
    UsageMeter,
    UsageNotReported,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from types import TracebackType

    from .._context import RunContext

__all__ = [
    "AsyncGovernedStream",
    "GovernedCall",
    "GovernedStream",
    "TokenUsage",
    "UsageMeter",
    "UsageNotReported",
]

R = TypeVar("R")
C = TypeVar("C")


@final
@dataclass(frozen=True, slots=True)
class GovernedCall:
    """One governed call as its wrapper prepared it: the wrapper's :class:`ModelCall`, and how
    to send one request.

    ``send(timeout)`` sends one request with the call's checked parameters: it returns the SDK's
    answer (a sync client) or the awaitable of it (an async client). ``client_timeout`` is the
    client's own timeout, ``name`` names the call in errors (``"openai chat.completions.create"``)
    and ``chat`` says what its spans report. A priced call gives its ``request`` (each attempt's
    reservation holds its worst case), and then ``send(timeout, max_tokens)`` sends it with the
    reservation's ``max_tokens`` (``None``: as given); ``subject`` names its executions in the
    executor's journal. The sync and the async world differ only in how
    ``send`` is waited for -- on a worker thread whose wait the run's cancellation ends
    (:func:`call`, :func:`open_stream`), or awaited in ``ctx.scope()`` (:func:`call_async`,
    :func:`open_stream_async`); every step around it is the :class:`ModelCall`'s.
    """

    model_call: ModelCall
    send: Callable[..., Any]  # send(timeout); with a request, send(timeout, max_tokens)
    client_timeout: object
    name: str
    chat: Chat
    request: ModelRequest | None = None
    subject: str | None = None

    def timeout(self) -> object:
        """The attempt's ``timeout=``: the client's, cut to the time the run has left."""
        return self.model_call.timeout(self.client_timeout)

    def reserve(self) -> ModelReservation:
        """The attempt's reservation (its worst case held, when priced), for its span too."""
        reservation = self.model_call.reserve(self.name, self.request)
        if self.chat.charges is not None:
            self.chat.charges.put(reservation)
        return reservation

    def send_for(self, reservation: ModelReservation, timeout: object) -> Any:
        """Send the attempt's request: with the reservation's ``max_tokens`` when priced."""
        if self.request is None:
            return self.send(timeout)
        return self.send(timeout, reservation.max_tokens)


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


def _answered(model_call: ModelCall, relay: _Relay) -> object:
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
        model_call.ended_wins()
        raise
    return item


def call(prepared: GovernedCall, usage_of: Callable[[R], TokenUsage | None]) -> R:
    """One governed call: ``send(timeout)`` per attempt, on a worker, under the executor."""
    model_call = prepared.model_call

    def attempt() -> R:
        with prepared.reserve() as reservation:
            timeout = prepared.timeout()

            def work(relay: _Relay) -> None:
                try:
                    response = prepared.send_for(reservation, timeout)
                    usage = reservation.reported(response, usage_of)
                except Exception as error:  # handed to the caller, which raises it
                    relay.put(_Failed(error))
                else:
                    relay.put(_RECORDING)  # the call is answered: a cancellation is too late
                    reservation.record(usage)  # by the worker: it counts if the caller left
                    relay.put(response)
                relay.put(_END)

            relay = _Relay(model_call.ctx, work, prepared.name)
            try:
                return cast("R", _answered(model_call, relay))  # the worker's other item
            finally:
                relay.stop()  # one item is all the caller takes

    chat = replace(prepared.chat, usage_of=usage_of)
    return model_call.execute(attempt, chat, subject=prepared.subject)


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

    __slots__ = ("_model_call", "_relay", "_reservation")

    def __init__(self, model_call: ModelCall, relay: _Relay, reservation: ModelReservation) -> None:
        self._model_call = model_call
        self._relay = relay
        self._reservation = reservation  # its usage is written once by the worker, before _END

    @property
    def usage(self) -> TokenUsage | None:
        """The usage recorded for this stream, once it is known; else ``None``."""
        return self._reservation.usage

    def __iter__(self) -> Iterator[C]:
        return self

    def __next__(self) -> C:
        if self._relay.stopped:  # closed, failed or cancelled: the run's ending, or the end
            self._model_call.ended_wins()
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
            self._model_call.ended_wins()
            raise item.error
        ctx = self._model_call.ctx
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
    model_call = prepared.model_call

    def attempt() -> GovernedStream[C]:
        with prepared.reserve() as reservation:
            timeout = prepared.timeout()

            def work(relay: _Relay) -> None:
                try:
                    stream = prepared.send_for(reservation, timeout)
                except Exception as error:
                    relay.put(_Failed(error))
                    relay.put(_END)
                    return
                relay.put(_OPENED)
                relay.hold(stream.close)
                _pump(stream, meter(), relay, reservation)

            relay = _Relay(model_call.ctx, work, prepared.name)
            _answered(model_call, relay)  # _OPENED: the chunks follow, on the same relay
            return GovernedStream(model_call, relay, reservation)

    return model_call.execute(attempt, prepared.chat, subject=prepared.subject)


def _pump(stream: Any, meter: UsageMeter[C], relay: _Relay, reservation: ModelReservation) -> None:
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
    relay.put(_RECORDING)
    try:
        reservation.end_stream(meter, complete=complete)
    except UsageNotReported as error:  # read to its end: there was no failure
        failure = error
    if failure is not None:
        relay.put(_Failed(failure))
    relay.put(_END)


# -- async: every await of the SDK in ctx.scope() -------------------------------------------------


async def call_async(prepared: GovernedCall, usage_of: Callable[[R], TokenUsage | None]) -> R:
    """One governed call in asyncio: ``await send(timeout)`` per attempt, under the executor."""
    model_call = prepared.model_call

    async def attempt() -> R:
        with prepared.reserve() as reservation:
            timeout = prepared.timeout()
            response: R = await model_call.request_async(
                lambda: prepared.send_for(reservation, timeout)
            )
            return reservation.record_response(response, usage_of)

    chat = replace(prepared.chat, usage_of=usage_of)
    return await model_call.execute_async(attempt, chat, subject=prepared.subject)


@final
class AsyncGovernedStream(Generic[C]):
    """The chunks of one governed streaming call in asyncio: ``async for``, or ``async with``.

    Like :class:`GovernedStream`: each chunk is awaited in ``ctx.scope()``, so the run's
    cancellation or deadline ends a silent stream at once with the run's ``RunTerminated``; the
    usage is recorded when reported, :class:`UsageNotReported` raised at an end without it, and
    what is known recorded when the stream is closed early.
    """

    __slots__ = ("_done", "_iterator", "_meter", "_model_call", "_reservation", "_stream")

    def __init__(
        self,
        model_call: ModelCall,
        stream: Any,
        meter: UsageMeter[C],
        reservation: ModelReservation,
    ) -> None:
        self._model_call = model_call
        self._stream = stream
        self._iterator: AsyncIterator[C] = stream.__aiter__()
        self._meter = meter
        self._reservation = reservation
        self._done = False

    @property
    def usage(self) -> TokenUsage | None:
        """The usage recorded for this stream, once it is known; else ``None``."""
        return self._reservation.usage

    def __aiter__(self) -> AsyncIterator[C]:
        return self

    async def __anext__(self) -> C:
        if self._done:
            raise StopAsyncIteration
        try:
            async with self._model_call.ctx.scope(Boundary.MODEL):
                chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            try:
                await self._finish(complete=True)
            except UsageNotReported as error:
                raise error from None
            raise
        except Exception:
            await self._finish(complete=False)
            self._model_call.ended_wins()
            raise
        self._meter.observe(chunk)
        return chunk

    async def _finish(self, *, complete: bool) -> None:
        if self._done:
            return
        self._done = True
        await self._stream.close()
        self._reservation.end_stream(self._meter, complete=complete)

    async def aclose(self) -> None:
        """Stop reading and close the SDK's stream; the usage known so far is recorded."""
        await self._finish(complete=False)

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
    model_call = prepared.model_call

    async def attempt() -> AsyncGovernedStream[C]:
        with prepared.reserve() as reservation:
            timeout = prepared.timeout()
            stream = await model_call.request_async(lambda: prepared.send_for(reservation, timeout))
            return AsyncGovernedStream(model_call, stream, meter(), reservation)

    return await model_call.execute_async(attempt, prepared.chat, subject=prepared.subject)
