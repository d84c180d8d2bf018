"""Requirement: RunContext SHALL be explicit and structurally immutable."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

import diagnosis_harness._context as context_module
from diagnosis_harness import Deadline, InvalidRunIdentity, ManualClock, RetryPolicies, RunContext
from diagnosis_harness.testing import FakeTool, ToolInvocation

from ._support import RUN_CONTEXT, WHITESPACE, limits, new_run

if TYPE_CHECKING:
    from collections.abc import Callable

FIELDS = (
    "session_id",
    "run_id",
    "deadline",
    "clock",
    "cancellation",
    "budget",
    "retry_policies",
    "lifecycle",
)


def _handles(ctx: RunContext) -> tuple[object, ...]:
    return tuple(getattr(ctx, name) for name in FIELDS)


def _assert_same_handles(seen: RunContext, ctx: RunContext) -> None:
    assert seen is ctx
    for name in FIELDS:
        assert getattr(seen, name) is getattr(ctx, name), name


# -- Scenario: Context crosses an asynchronous boundary ---------------------------------------


@pytest.mark.spec(RUN_CONTEXT, "Context crosses an asynchronous boundary")
def test_context_crosses_an_asynchronous_boundary() -> None:
    ctx = new_run()
    tool = FakeTool("search", result="found")

    def on_worker(call_id: str) -> tuple[str, RunContext, tuple[object, ...]]:
        # What a boundary body would read, on the thread it runs on.
        return tool(ctx, call_id, query="disk"), ctx, _handles(ctx)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = [pool.submit(on_worker, f"call-{i}").result() for i in range(2)]

    async def in_asyncio() -> list[str]:
        from_thread = await asyncio.to_thread(tool, ctx, "call-thread", query="cpu")

        async def in_task(call_id: str) -> str:
            return tool(ctx, call_id, query="mem")

        from_task = await asyncio.create_task(in_task("call-task"))
        return [from_thread, from_task]

    assert asyncio.run(in_asyncio()) == ["found", "found"]

    for value, seen, handles in results:
        assert value == "found"
        _assert_same_handles(seen, ctx)
        assert all(a is b for a, b in zip(handles, _handles(ctx), strict=True))
    assert tool.calls == 4
    main_thread = threading.get_ident()
    invocation: ToolInvocation
    for invocation in tool.invocations:
        _assert_same_handles(invocation.context, ctx)
    threads = {invocation.thread_id for invocation in tool.invocations}
    assert [i.tool_call_id for i in tool.invocations] == [
        "call-0",
        "call-1",
        "call-thread",
        "call-task",
    ]
    assert threads - {main_thread}, "some invocation ran on another thread"
    # The one budget saw every call, whichever thread or task made it.
    assert ctx.budget.snapshot().per_tool_calls == {"search": 4}


# -- Scenario: Invalid identity starts a Run --------------------------------------------------


@pytest.fixture
def constructed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every run part that ``create`` builds, by wrapping the classes it calls."""
    built: list[str] = []

    def recording(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            built.append(name)
            return real(*args, **kwargs)

        return wrapper

    for name in ("Cancellation", "Lifecycle", "Budget"):
        monkeypatch.setattr(context_module, name, recording(name, getattr(context_module, name)))
    # Classes whose type create() checks stay in place; their factories are wrapped instead.
    after = Deadline.after.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(Deadline, "after", classmethod(recording("Deadline.after", after)))
    defaults = RetryPolicies.defaults.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        RetryPolicies, "defaults", classmethod(recording("RetryPolicies.defaults", defaults))
    )
    return built


BLANK_IDS = ["", " ", "   ", "\t", "\n", "\u3000", WHITESPACE]


@pytest.mark.spec(RUN_CONTEXT, "Invalid identity starts a Run")
def test_invalid_identity_starts_a_run(constructed: list[str]) -> None:
    untyped: Any = RunContext.create
    for which in ("session_id", "run_id"):
        for blank in BLANK_IDS:
            ids = {"session_id": "session-1", "run_id": "run-1", which: blank}
            # Limits, timeout and clock are invalid too: identity is checked before all else.
            with pytest.raises(InvalidRunIdentity, match=which) as caught:
                untyped(**ids, limits="not limits", timeout=float("nan"), clock=object())
            assert isinstance(caught.value, ValueError)
            with pytest.raises(InvalidRunIdentity, match=which):
                untyped(**ids, limits=limits(), timeout=30, clock=ManualClock())
    # No budget, cancellation, lifecycle, deadline or retry policies was created or published.
    assert constructed == []
    # The wrappers do see a valid creation, so the empty list above means something.
    RunContext.create(session_id="s", run_id="r", limits=limits(), timeout=1)
    assert set(constructed) == {
        "Cancellation",
        "Lifecycle",
        "Budget",
        "Deadline.after",
        "RetryPolicies.defaults",
    }
