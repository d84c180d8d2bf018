"""The stall matrix: every adapter, every stall, every way a run ends -- each ends on time.

{governed ``OpenAI``, ``AsyncOpenAI``, ``Anthropic``, ``AsyncAnthropic`` clients, pydantic-ai's
``HarnessCapability``, openai-agents' ``harness_run_config`` + ``run_governed``} x {the model
request stalls, the stream stalls after 2 events, an async tool stalls, a sync tool stalls} x
{the run's deadline passes (0.3 s on the ``SystemClock``), another thread cancels it, another
process cancels it through Redis}. Each cell asserts what a user relies on: the call ends within
``SLACK`` (0.5 s) of the deadline or the cancel, with the ending's ``RunTerminated``
(``RunTimedOut`` / ``RunCancelled``), the run's cancellation callback ran exactly once, and nothing
was granted after the end -- no reservation, no request to the provider, no tool started, also
once the stall is released and the late answer arrives.

The stalls are real: the loopback provider (``loopback.py``) holds its answer on a
``threading.Event``, before the status line or after the stream's first 2 events; a tool waits on
a ``threading.Event`` (sync) or an ``asyncio.Event`` (async). Every one is released when the cell
is over, never on a timer. The cancel fires once the stall is known to be in progress (the
provider holds a request, the tool has started). Each cell runs on its own thread, so a cell that
hangs is reported (``> HANG s``) rather than hanging the suite; ``--stall-table`` prints every
cell's figure (``stall_table.py``).

For the raw SDK clients a tool is run the way a user of them runs it: the governed client's answer
asks for the tool, which runs through :class:`~diagnosis_harness.integrations.GovernedTools`.
One more test, after the matrix, covers the one way a sync client's stream can outlive its caller
that no cell reaches: a stream the provider opens only after the caller has left.

Cost: one ``redis-server`` and one helper interpreter for the whole matrix (the cross-process
column), a loopback server per cell; the 72 cells take about 20 s on a loaded 2-core machine, a
quarter of it the 24 deadline cells' 0.3 s each, plus importing the four SDKs. Marked
``version_independent``: what it asserts does not depend on the Python version, so CI runs it
once, in ``tox -e e2e``.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")
# Imported here, not in the first cell that builds a client: an import is not a stall.
pytest.importorskip("anthropic")

from agents import Agent as SdkAgent
from agents import function_tool, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider as SdkOpenAIProvider
from pydantic_ai import Agent, Tool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from diagnosis_harness import (
    BudgetLimits,
    BudgetUsage,
    CancellationReason,
    RunCancelled,
    RunContext,
    RunState,
    RunTerminated,
    RunTimedOut,
    SystemClock,
)
from diagnosis_harness.integrations import (
    AsyncGovernedAnthropic,
    AsyncGovernedOpenAI,
    GovernedAnthropic,
    GovernedOpenAI,
    GovernedTools,
    ModelClientConfig,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    openai_client,
)
from diagnosis_harness.integrations.openai_agents import (
    governed_tool,
    harness_run_config,
    run_governed,
    run_governed_streamed,
)
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability
from diagnosis_harness.redis import RedisRunStore
from redis_store.server import REDIS_SERVER, RedisServer

from . import canceller
from .loopback import LoopbackServer, Reply, ToolCall, serve
from .stall_table import ADAPTERS, ENDINGS, RESULTS, STALLS, CellResult

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator
    from multiprocessing.connection import Connection

    import anthropic
    import openai

pytestmark = [pytest.mark.version_independent, pytest.mark.end_to_end]

set_tracing_disabled(True)  # openai-agents would otherwise try to export traces to OpenAI

DEADLINE = 0.3  # seconds: the deadline column's run, on the SystemClock
FAR = 60.0  # seconds: the cancel columns' runs, whose deadline must not be what ends them
SLACK = 0.5  # seconds of scheduling a cell may end after its deadline or cancel: room for
# a loaded CI machine (0.208 s was seen with three test envs on two cores); the figures unloaded
# are in docs/guides/stalls.md
HANG = 5.0  # seconds after the deadline or cancel at which a cell is reported as hung
BOUND = 30.0  # seconds any other wait of the test may take before it fails
PING = 0.05  # seconds between the pings of a stream stalled mid-way: no read timeout can fire

LIMITS = BudgetLimits(
    model_calls=10,
    tool_calls=10,
    per_tool_calls=10,
    input_tokens=100_000,
    output_tokens=100_000,
    total_tokens=200_000,
    run_bytes=100_000,
)
TOOL = "lookup"
TOOL_CALL = ToolCall(TOOL, {"q": "disk"}, "call_1")
PROMPT = "why is checkout slow?"
MESSAGES = [{"role": "user", "content": PROMPT}]
_SPAWN = multiprocessing.get_context("spawn")


# -- the shared parts: one Redis server and one cancelling process for the whole matrix -----------


@dataclass
class OtherProcess:
    """The helper process of ``canceller.py``, and a store on the same server for this side."""

    store: RedisRunStore
    conn: Connection


@pytest.fixture(scope="module")
def other_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OtherProcess]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    server = RedisServer(tmp_path_factory.mktemp("stall-redis"))
    server.start()
    namespace = f"stall-{uuid.uuid4().hex[:8]}"
    client = server.client()
    store = RedisRunStore(client, namespace=namespace)
    ours, theirs = _SPAWN.Pipe()
    process = _SPAWN.Process(target=canceller.serve, args=(server.port, namespace, theirs))
    process.start()
    try:
        yield OtherProcess(store, ours)
    finally:
        ours.send(None)
        process.join(BOUND)
        store.close()
        client.close()
        server.stop()
    assert process.exitcode == 0


# -- the stalls -----------------------------------------------------------------------------------


@dataclass
class StalledTool:
    """A tool that stalls until released: on a threading.Event (sync) or an asyncio.Event."""

    started: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _async: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def sync(self, q: str) -> str:
        self.started.set()
        try:
            self._release.wait(BOUND)
        finally:
            self.finished.set()
        return f"{q}: full"

    async def async_(self, q: str) -> str:
        event = asyncio.Event()
        with self._lock:
            self._async = (asyncio.get_running_loop(), event)
        self.started.set()
        try:
            await event.wait()
        finally:
            self.finished.set()
        return f"{q}: full"

    def release(self) -> None:
        self._release.set()
        with self._lock:
            waiting = self._async
        if waiting is not None:
            loop, event = waiting
            with contextlib.suppress(RuntimeError):  # its loop has closed: nothing waits on it
                loop.call_soon_threadsafe(event.set)


@dataclass
class Cell:
    """One cell's run, provider and tool, and when its call ended (on the cell's thread)."""

    adapter: str
    stall: str
    ctx: RunContext
    server: LoopbackServer
    tool: StalledTool
    ended: threading.Event = field(default_factory=threading.Event)
    ended_at: float | None = None
    error: BaseException | None = None
    # The sync SDK clients, closed by the test once the cell is over: a client a user keeps
    # open must not be what frees a worker the run abandoned.
    clients: list[openai.OpenAI | anthropic.Anthropic] = field(default_factory=list)

    def end(self, error: BaseException | None) -> None:
        self.ended_at = time.monotonic()
        self.error = error
        self.ended.set()

    @property
    def stalled(self) -> bool:
        if self.stall in ("request", "stream"):
            return self.server.held > 0
        return self.tool.started.is_set()

    def wait_for_stall(self) -> bool:
        if self.stall in ("request", "stream"):
            try:
                self.server.wait_for_stalled(1, BOUND)
            except AssertionError:
                return False
            return True
        return self.tool.started.wait(BOUND)

    def script(self) -> None:
        """The provider's answers: a stalled one, or a tool call and then the final answer.

        A stalled answer asks for the tool too: were it acted on after the run ended, the tool
        would start.
        """
        if self.stall == "request":
            self.server.script(Reply(text="", tool_calls=(TOOL_CALL,), stall=threading.Event()))
        elif self.stall == "stream":
            stall = threading.Event()
            self.server.script(
                Reply(text="partial answer", tool_calls=(TOOL_CALL,), stall=stall, chunks=4,
                      stall_after_events=2, ping_every=PING)
            )  # fmt: skip
        else:
            self.server.script(Reply(text="", tool_calls=(TOOL_CALL,)))


# -- the adapters, each driven as its user drives it ----------------------------------------------


def _config(cell: Cell) -> ModelClientConfig:
    """The client's own timeout is long: only the run may end a cell."""
    url = cell.server.url if cell.adapter.startswith("anthropic") else cell.server.openai_url
    return ModelClientConfig(timeout_seconds=BOUND, base_url=url)


def _tool_call_id_openai(completion: Any) -> str:
    return str(completion.choices[0].message.tool_calls[0].id)


def _tool_call_id_anthropic(message: Any) -> str:
    return str(next(block.id for block in message.content if block.type == "tool_use"))


def _run_tool_sync(cell: Cell, tool_call_id: str) -> None:
    tools = GovernedTools(cell.ctx)
    if cell.stall == "sync-tool":
        tools.call(TOOL, tool_call_id, cell.tool.sync, "disk")
    else:
        asyncio.run(tools.call_async(TOOL, tool_call_id, cell.tool.async_, "disk"))


async def _run_tool_async(cell: Cell, tool_call_id: str) -> None:
    tools = GovernedTools(cell.ctx)
    if cell.stall == "sync-tool":
        tools.call(TOOL, tool_call_id, cell.tool.sync, "disk")
    else:
        await tools.call_async(TOOL, tool_call_id, cell.tool.async_, "disk")


def _drive_openai(cell: Cell) -> None:
    client = openai_client(_config(cell), api_key="test")
    cell.clients.append(client)
    governed = GovernedOpenAI(client, cell.ctx, policy="diagnosis_agent")
    params = {"model": "gpt-4o-mini", "messages": MESSAGES}
    if cell.stall == "stream":
        with governed.stream(**params) as chunks:
            for _chunk in chunks:
                pass
        return
    completion = governed.create(**params)
    if cell.stall != "request":
        _run_tool_sync(cell, _tool_call_id_openai(completion))


def _drive_anthropic(cell: Cell) -> None:
    client = anthropic_client(_config(cell), api_key="test")
    cell.clients.append(client)
    governed = GovernedAnthropic(client, cell.ctx, policy="diagnosis_agent")
    params = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": MESSAGES}
    if cell.stall == "stream":
        with governed.stream(**params) as events:
            for _event in events:
                pass
        return
    message = governed.create(**params)
    if cell.stall != "request":
        _run_tool_sync(cell, _tool_call_id_anthropic(message))


async def _drive_openai_async(cell: Cell) -> None:
    client = async_openai_client(_config(cell), api_key="test")
    governed = AsyncGovernedOpenAI(client, cell.ctx, policy="diagnosis_agent")
    params = {"model": "gpt-4o-mini", "messages": MESSAGES}
    try:
        if cell.stall == "stream":
            async with await governed.stream(**params) as chunks:
                async for _chunk in chunks:
                    pass
            return
        completion = await governed.create(**params)
        if cell.stall != "request":
            await _run_tool_async(cell, _tool_call_id_openai(completion))
    finally:
        await client.close()


async def _drive_anthropic_async(cell: Cell) -> None:
    client = async_anthropic_client(_config(cell), api_key="test")
    governed = AsyncGovernedAnthropic(client, cell.ctx, policy="diagnosis_agent")
    params = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": MESSAGES}
    try:
        if cell.stall == "stream":
            async with await governed.stream(**params) as events:
                async for _event in events:
                    pass
            return
        message = await governed.create(**params)
        if cell.stall != "request":
            await _run_tool_async(cell, _tool_call_id_anthropic(message))
    finally:
        await client.close()


async def _drive_pydantic_ai(cell: Cell) -> None:
    client = async_openai_client(_config(cell), api_key="test")
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    function = cell.tool.sync if cell.stall == "sync-tool" else cell.tool.async_
    agent: Agent[None, str] = Agent(
        model, tools=[Tool(function, name=TOOL)], capabilities=[HarnessCapability(cell.ctx)]
    )
    try:
        if cell.stall == "stream":
            async with agent.run_stream(PROMPT) as result:
                await result.get_output()
        else:
            await agent.run(PROMPT)
    finally:
        await client.close()


async def _drive_openai_agents(cell: Cell) -> None:
    client = async_openai_client(_config(cell), api_key="test")
    provider = SdkOpenAIProvider(openai_client=client, use_responses=False)
    config = harness_run_config(cell.ctx, model_provider=provider, model="gpt-4o-mini")
    function = cell.tool.sync if cell.stall == "sync-tool" else cell.tool.async_
    tool = governed_tool(function_tool(function, name_override=TOOL))
    agent = SdkAgent(name="diagnosis", tools=[tool])
    try:
        if cell.stall == "stream":
            await run_governed_streamed(agent, PROMPT, run_config=config)
        else:
            await run_governed(agent, PROMPT, run_config=config)
    finally:
        await client.close()


_SYNC: dict[str, Callable[[Cell], None]] = {
    "openai": _drive_openai,
    "anthropic": _drive_anthropic,
}
_ASYNC: dict[str, Callable[[Cell], Awaitable[None]]] = {
    "openai-async": _drive_openai_async,
    "anthropic-async": _drive_anthropic_async,
    "pydantic-ai": _drive_pydantic_ai,
    "openai-agents": _drive_openai_agents,
}


def _drive(cell: Cell) -> None:
    """On the cell's thread: the adapter's call, its end recorded the moment it returns or raises.

    The end of an async call is taken inside the loop, not when ``asyncio.run`` returns: that is
    when the caller gets the run's ending (``asyncio.run`` may still wait for its executor's
    threads after it, which the table would not be about).
    """
    if cell.adapter in _SYNC:
        try:
            _SYNC[cell.adapter](cell)
        except BaseException as error:
            cell.end(error)
            if not isinstance(error, Exception):
                raise
        else:
            cell.end(None)
        return

    async def main() -> None:
        try:
            await _ASYNC[cell.adapter](cell)
        except Exception as error:
            cell.end(error)
        else:
            cell.end(None)

    asyncio.run(main())


# -- the matrix -----------------------------------------------------------------------------------

EXPECTED = {
    "deadline": (RunTimedOut, RunState.TIMED_OUT, CancellationReason.DEADLINE_EXCEEDED),
    "thread-cancel": (RunCancelled, RunState.CANCELLED, CancellationReason.USER_REQUESTED),
    "process-cancel": (RunCancelled, RunState.CANCELLED, CancellationReason.USER_REQUESTED),
}
CELLS = [
    pytest.param(adapter, stall, ending, id=f"{adapter}-{stall}-{ending}")
    for adapter in ADAPTERS
    for stall in STALLS
    for ending in ENDINGS
]


def _run(ending: str, deadline: float, other: OtherProcess | None) -> RunContext:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    store = other.store if other is not None else None
    timeout = deadline if ending == "deadline" else FAR
    return RunContext.create(
        session_id=canceller.SESSION,
        run_id=run_id,
        limits=LIMITS,
        timeout=timeout,
        clock=SystemClock(),
        store=store,
    )


def _stream_workers_left(cell: Cell) -> list[str]:
    """The sync clients' stream workers still reading, HANG s after the caller has left.

    Each reads on a thread named after its call; the stall's pings reach it, and the stream
    the caller's leaving closed must end it at the next one, not when the provider goes on.
    """
    if cell.adapter not in _SYNC or cell.stall != "stream":
        return []
    names = {"openai chat.completions.create", "anthropic messages.create"}
    workers = [thread for thread in threading.enumerate() if thread.name in names]
    for worker in workers:
        worker.join(HANG)
    return [worker.name for worker in workers if worker.is_alive()]


def _refusal(reserve: Callable[[], object]) -> RunTerminated | None:
    try:
        reserve()
    except RunTerminated as refused:
        return refused
    return None


@dataclass
class Outcome:
    """What one play of a cell showed; ``problems`` is empty when it ended as it must."""

    stalled: bool
    late: float | None
    problems: list[str]


@dataclass
class _AtEnd:
    """What the run had granted, and what had started, when its call ended."""

    granted: BudgetUsage
    refusals: list[RunTerminated | None]
    requests: int
    tool_started: bool
    reading: list[str]


def _end(cell: Cell, ctx: RunContext, ending: str, other: OtherProcess | None) -> float:
    """End the run as ``ending`` says, once the stall is reached; the monotonic time it ended."""
    if ending == "deadline":  # nothing to do but wait; whether the stall was reached, after
        return ctx.deadline.instant_ns / 1e9
    if not cell.wait_for_stall():
        since = time.monotonic()
        if other is not None:
            other.conn.send("skip")
        return since
    if ending == "thread-cancel":
        since = time.monotonic()
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
        return since
    assert other is not None
    other.conn.send("cancel")
    cancelled_at, won = other.conn.recv()
    assert won
    return float(cancelled_at)


def _at_end(cell: Cell, ctx: RunContext, server: LoopbackServer) -> _AtEnd:
    """What the run grants once it has ended: nothing, whichever boundary asks."""
    granted = ctx.budget.snapshot()
    refusals = [_refusal(ctx.reserve_model_call), _refusal(lambda: ctx.reserve_tool_call(TOOL))]
    return _AtEnd(
        granted, refusals, server.count, cell.tool.started.is_set(), _stream_workers_left(cell)
    )


def _release(cell: Cell, server: LoopbackServer, thread: threading.Thread, at_end: _AtEnd) -> None:
    """Release every stall: the late answers arrive, and must start nothing."""
    server.release_all()
    cell.tool.release()
    thread.join(BOUND)
    for client in cell.clients:
        client.close()
    if at_end.tool_started:
        assert cell.tool.finished.wait(BOUND)


def _ending_problems(
    ending: str, cell: Cell, ctx: RunContext, late: float | None, *, in_time: bool
) -> list[str]:
    """Whether the call ended on time, raising the ending's error, the run in its state."""
    expected_error, expected_state, _ = EXPECTED[ending]
    problems = []
    if late is None:
        problems.append("hung")
    elif late > SLACK:
        problems.append(f"ended {late:.3f} s after, more than {SLACK} s")
    if in_time and not isinstance(cell.error, expected_error):
        problems.append(f"raised {type(cell.error).__name__}: {cell.error}"[:200])
    if ctx.lifecycle.state is not expected_state:
        problems.append(f"the run is {ctx.lifecycle.state.name}")
    return problems


def _after_end_problems(
    ending: str, cell: Cell, ctx: RunContext, server: LoopbackServer, at_end: _AtEnd
) -> list[str]:
    """Whether anything was granted, sent or started after the end."""
    expected_error = EXPECTED[ending][0]
    problems = []
    if not all(isinstance(refusal, expected_error) for refusal in at_end.refusals):
        problems.append(f"after the end, reservations gave {at_end.refusals}")
    granted = ctx.budget.snapshot()
    changed = [
        dimension
        for dimension in ("model_calls", "tool_calls", "per_tool_calls", "run_bytes")
        if getattr(granted, dimension) != getattr(at_end.granted, dimension)
    ]
    if changed:
        problems.append(f"granted after the end: {', '.join(changed)}")
    if server.count != at_end.requests:
        problems.append(f"{server.count - at_end.requests} request(s) sent after the end")
    if cell.tool.started.is_set() and not at_end.tool_started:
        problems.append("the tool started after the end")
    if at_end.reading:
        problems.append(f"{at_end.reading} still read the stalled stream after the end")
    return problems


def _play(adapter: str, stall: str, ending: str, deadline: float, other: OtherProcess | None
          ) -> Outcome:  # fmt: skip
    """One play of a cell: the stall, the ending, then the stall released; what each showed."""
    expected_reason = EXPECTED[ending][2]
    with serve() as server:
        ctx = _run(ending, deadline, other)
        reasons: list[CancellationReason] = []
        called = threading.Event()

        def callback(reason: CancellationReason) -> None:
            reasons.append(reason)
            called.set()

        ctx.cancellation.register(callback)
        if other is not None:
            other.conn.send(ctx.run_id)
            assert other.conn.recv() == "attached"
        cell = Cell(adapter, stall, ctx, server, StalledTool())
        cell.script()
        thread = threading.Thread(target=_drive, args=(cell,), name=f"cell-{adapter}", daemon=True)
        thread.start()

        since = _end(cell, ctx, ending, other)
        in_time = cell.ended.wait(max(0.0, since + HANG - time.monotonic()))
        late = None if not in_time or cell.ended_at is None else cell.ended_at - since
        stalled = cell.stalled
        at_end = _at_end(cell, ctx, server)
        _release(cell, server, thread, at_end)
        delivered = called.wait(BOUND)

    problems = _ending_problems(ending, cell, ctx, late, in_time=in_time)
    if not delivered or reasons != [expected_reason]:
        problems.append(f"callbacks ran with {[reason.value for reason in reasons]}")
    problems += _after_end_problems(ending, cell, ctx, server, at_end)
    if thread.is_alive():
        problems.append(f"the cell's thread still runs {BOUND} s after the stall was released")
    return Outcome(stalled, late, problems)


@pytest.mark.parametrize(("adapter", "stall", "ending"), CELLS)
def test_a_stall_ends_by_the_deadline_or_the_cancel(
    adapter: str,
    stall: str,
    ending: str,
    request: pytest.FixtureRequest,
    direct_connections: None,
) -> None:
    """The call ends within SLACK of the deadline or the cancel, as the run's ending, on time.

    A deadline that passed before the stall was reached (a loaded machine building the agent)
    proves nothing: that cell is played again with the deadline doubled, at most twice.
    """
    other: OtherProcess | None = (
        request.getfixturevalue("other_process") if ending == "process-cancel" else None
    )
    for deadline in (DEADLINE, 2 * DEADLINE, 4 * DEADLINE):
        outcome = _play(adapter, stall, ending, deadline, other)
        if outcome.stalled or ending != "deadline":
            break
    problems = outcome.problems if outcome.stalled else ["the stall was never reached"]
    request.config.stash.setdefault(RESULTS, {})[adapter, stall, ending] = CellResult(
        late=outcome.late, hung_after=HANG, ok=not problems, note="; ".join(problems)
    )
    assert not problems, "; ".join(problems)


def test_a_stream_that_opens_after_its_caller_left_is_closed_at_once(
    direct_connections: None,
) -> None:
    """The run is cancelled while the provider holds the stream's headers: the caller leaves at
    once; when the provider answers later and keeps the stream alive with pings, the worker that
    opened it closes it at once and ends, rather than reading a stream nobody reads."""
    arrived, answer = threading.Event(), threading.Event()

    def hold_the_headers(_seen: object) -> None:  # on the handler's thread, before it answers
        arrived.set()
        answer.wait(BOUND)

    with serve(on_request=hold_the_headers) as server:
        stall = threading.Event()
        server.script(Reply(stall=stall, stall_after_events=0, ping_every=PING))
        ctx = _run("thread-cancel", DEADLINE, None)
        client = openai_client(
            ModelClientConfig(timeout_seconds=BOUND, base_url=server.openai_url), api_key="test"
        )
        governed = GovernedOpenAI(client, ctx, policy="diagnosis_agent")
        before = set(threading.enumerate())
        ended: list[BaseException] = []

        def stream() -> None:
            try:
                governed.stream(model="gpt-4o-mini", messages=MESSAGES)
            except RunCancelled as error:
                ended.append(error)

        caller = threading.Thread(target=stream)
        caller.start()
        assert arrived.wait(BOUND)
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
        caller.join(BOUND)
        assert len(ended) == 1  # the caller left with the run's ending, the headers still held
        (worker,) = [
            thread
            for thread in set(threading.enumerate()) - before
            if thread.name == "openai chat.completions.create"
        ]

        answer.set()  # the provider answers now, and pings on: only the close can end the read
        server.wait_for_stalled(1, BOUND)
        worker.join(HANG)
        still_reading = worker.is_alive()
        stall.set()
        client.close()
    assert not still_reading
    assert ctx.budget.snapshot().model_calls == server.count == 1
