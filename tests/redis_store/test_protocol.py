"""What the Redis functions answer, and the reasons they word, are declared once.

``redis/_protocol.py`` names each function's answers; the Lua prelude builds them from the same
declaration. These tests drive every function into every answer it declares on a real server and
decode each into its named tuple; an answer of another shape is a clear error naming the
function. ``_endings.py`` words every reason once; the server, asked for each text and for real
refusals, writes what Python writes.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
import redis

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetLimits,
    BudgetState,
    CancellationReason,
    Deadline,
    ManualClock,
    RunContext,
    RunState,
    RunTerminated,
)
from diagnosis_harness._endings import REASON_TEXTS, ReasonText
from diagnosis_harness.redis._link import StoreLink
from diagnosis_harness.redis._protocol import (
    ANSWERS,
    Capacity,
    Created,
    Held,
    Passed,
    ProtocolError,
    Snapshot,
    Status,
    Tree,
    Unknown,
    decode,
)
from diagnosis_harness.redis._scripts import prelude
from diagnosis_harness.redis._store import RunKeys

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from diagnosis_harness.redis import RedisRunStore
    from diagnosis_harness.redis._protocol import Answer

LIMITS = BudgetLimits(
    model_calls=1,
    tool_calls=1,
    per_tool_calls=1,
    input_tokens=10,
    output_tokens=10,
    total_tokens=10,
    run_bytes=10,
    per_tool_overrides={"fetch": 2},
)
_NS = 1_000_000_000


@pytest.fixture
def link(client: redis.Redis) -> Iterator[StoreLink]:
    link = StoreLink(client, "test")
    yield link
    link.close()


class _Calls:
    """Each function called on runs of a store, every answer recorded as (function, code)."""

    def __init__(self, store: RedisRunStore, link: StoreLink, namespace: str) -> None:
        self.store, self.link, self.namespace = store, link, namespace
        self.seen: dict[tuple[str, str], type[Answer]] = {}

    def run(self, run_id: str) -> RunKeys:
        RunContext.create(
            session_id="s",
            run_id=run_id,
            limits=LIMITS,
            deadline=Deadline.at_ns(10 * _NS),
            clock=ManualClock(),
            store=self.store,
        )
        return RunKeys.of(self.namespace, run_id)

    def __call__(self, function: str, keys: RunKeys, *args: str | int, at: int = 1) -> Answer:
        """``function``'s answer, called at ``at`` ns on the run's timeline (its deadline: 10 s)."""
        op_id = uuid.uuid4().hex
        answer = self.link.call(function, keys, [keys.channel, op_id, at, *args])
        assert isinstance(answer, ANSWERS[function][answer.code])  # decoded into its own tuple
        self.seen[function, answer.code] = type(answer)
        return answer


def _every_answer(calls: _Calls) -> None:
    keys = calls.run("run-1")
    fields: list[str | int] = ["state", "RUNNING", "--limits--"]
    assert calls("create", keys, *fields) == Created("exists")
    assert calls("create", RunKeys.of(calls.namespace, "bare"), *fields) == Created("ok")
    assert calls("check", keys, "GUARD") == Passed("ok")
    assert calls("reserve_tool_call", keys, "t", "'t'") == Passed("ok")
    assert calls("reserve_bytes", keys, 4) == Passed("ok")
    assert calls("capacity", keys, 8, 5) == Capacity("ok", 8, 5)
    assert calls("capacity", keys, 8, 5) == Capacity("no", 8, 5)
    assert calls("capacity", keys, 9, 0) == Capacity("limit", 8, 5)
    usage = calls("record_token_usage", keys, 2, 3)
    assert isinstance(usage, Status)
    assert (usage.code, usage.state, usage.budget) == ("ok", RunState.RUNNING, BudgetState.ACTIVE)
    assert (usage.at, usage.signal, usage.exhausted) == (None, None, None)
    snapshot = calls("snapshot", keys)
    assert isinstance(snapshot, Snapshot)
    assert snapshot.status == usage
    assert (snapshot.tool_calls, snapshot.input_tokens, snapshot.run_bytes) == (1, 2, 4)
    assert snapshot.per_tool == {"t": 1}
    assert calls("reserve_model_call", keys) == Passed("ok")
    refused = calls("reserve_model_call", keys)  # past model_calls=1: the run ends now
    assert isinstance(refused, Status)
    assert (refused.code, refused.state) == ("ended_now", RunState.BUDGET_EXHAUSTED)
    assert refused.exhausted is BudgetDimension.MODEL_CALLS
    assert refused.signal is CancellationReason.BUDGET_EXHAUSTED
    assert (refused.at, refused.boundary) == (1, Boundary.MODEL)  # the limit's own boundary
    for function, args in (
        ("check", ("GUARD",)),
        ("reserve_model_call", ()),
        ("reserve_tool_call", ("t", "'t'")),
        ("reserve_bytes", (1,)),
        ("finish", ("succeed", "done")),
        ("cancel", ("user_requested", "cancel", "cancelled: USER_REQUESTED")),
    ):
        assert calls(function, keys, *args)[:3] == (
            "ended",
            RunState.BUDGET_EXHAUSTED,
            refused.reason,
        )
    past_deadline = calls("check", calls.run("late"), "GUARD", at=11 * _NS)
    assert past_deadline[:2] == ("ended_now", RunState.TIMED_OUT)
    assert isinstance(past_deadline, Status)
    assert past_deadline.boundary is Boundary.GUARD
    for function, args in (("reserve_tool_call", ("t", "'t'")), ("reserve_bytes", (6,))):
        ending = calls.run(f"ends-at-{function}")
        assert calls(function, ending, *args) == Passed("ok")
        assert calls(function, ending, *args)[:2] == ("ended_now", RunState.BUDGET_EXHAUSTED)
    # A partial hold (a least hold sent) answers the amount held: all of it, with no money limit.
    assert calls("reserve_model_call", calls.run("run-7"), 5, 3) == Held("held", 5)
    over = calls("record_token_usage", calls.run("run-2"), 11, 0)
    assert isinstance(over, Status)
    assert (over.code, over.exhausted) == ("ended_now", BudgetDimension.INPUT_TOKENS)
    assert calls("finish", calls.run("run-3"), "succeed", "done")[:3] == (
        "ended_now",
        RunState.SUCCESS,
        "done",
    )
    settled = calls("settle", calls.run("run-5"), "TOOL", 0, 5, 0, 0)
    assert isinstance(settled, Status)
    assert (settled.code, settled.state, settled.budget) == (
        "ok",
        RunState.RUNNING,
        BudgetState.ACTIVE,
    )
    over = calls("settle", calls.run("run-6"), "MODEL", 0, 0, 11, 0)  # past input_tokens=10
    assert isinstance(over, Status)
    assert (over.code, over.exhausted) == ("ended_now", BudgetDimension.INPUT_TOKENS)
    cancelled = calls("cancel", calls.run("run-4"), "shutdown", "cancel", "cancelled: SHUTDOWN")
    assert cancelled[:2] == ("ended_now", RunState.CANCELLED)
    assert isinstance(cancelled, Status)
    assert cancelled.signal is CancellationReason.SHUTDOWN
    # A run tree: a child's ID claimed under its own tag, then the child under its root's.
    child = RunKeys.of(calls.namespace, "child-1", keys.root_id)
    claim = ("run-9", 60_000, "claim")
    assert calls("claim", child.claim, *claim) == Created("ok")
    assert calls("claim", calls.run("run-8"), *claim) == Created("exists")  # a root's ID
    live = calls.run("run-9")
    child = RunKeys.of(calls.namespace, "child-1", live.root_id)
    limits: list[str | int] = ["limits", "{}", "l_model_calls", 1, "model_calls", 0, "--limits--"]
    assert calls("create_child", child, "run-9", 10 * _NS, *limits) == Created("ok")
    assert calls("create_child", child, "run-9", 10 * _NS, *limits) == Created("exists")
    ended = calls("create_child", RunKeys.of(calls.namespace, "child-2", "run-3"), "run-3", 1)
    assert isinstance(ended, Status)
    assert (ended.code, ended.state) == ("ended", RunState.SUCCESS)  # the parent's ending
    tree = calls("tree", live)
    assert isinstance(tree, Tree)
    assert [(run.run_id, run.parent) for run in tree.runs] == [
        ("run-9", None),
        ("child-1", "run-9"),
    ]
    assert tree.runs[0].snapshot.status.state is RunState.RUNNING
    gone = RunKeys.of(calls.namespace, "never-created")
    for function in ANSWERS:
        if function not in ("create", "claim"):  # the two that make what is not there
            assert calls(function, gone, 8, 1) == Unknown("unknown")


def test_every_answer_a_function_declares_decodes_into_its_tuple(
    store: RedisRunStore, link: StoreLink, namespace: str
) -> None:
    calls = _Calls(store, link, namespace)
    _every_answer(calls)
    declared = {(f, code): kind for f, shapes in ANSWERS.items() for code, kind in shapes.items()}
    assert calls.seen == declared  # every declared answer reached, and nothing else


def test_a_snapshot_carries_the_status_first() -> None:
    assert Snapshot._fields[: len(Status._fields)] == Status._fields


# -- an answer of another shape: a clear error naming the function ---------------------------------


@pytest.mark.parametrize(
    ("function", "raw", "message"),
    [
        (
            "reserve_model_call",
            [b"ok", b"x"],
            "'reserve_model_call' answered 'ok' with 2 fields; its Passed has 1: code",
        ),
        (
            "finish",
            [b"ended", b"RUNNING"],
            "'finish' answered 'ended' with 2 fields; its Status "
            "has 8: code, state, reason, at, signal, exhausted, budget, boundary",
        ),
        ("capacity", [b"ok", b"8", b"1", b"2"], "'capacity' answered 'ok' with 4 fields"),
        (
            "snapshot",
            [b"ok", *[b"0"] * 15],
            "'snapshot' answered 'ok' with 16 fields; its "
            "Snapshot has 15: .*, then \\(name, count\\) pairs",
        ),
        (
            "check",
            [b"granted"],
            "'check' answered the code 'granted': it answers 'ok', 'ended', "
            "'ended_now', 'unknown' only",
        ),
        ("create", [], "'create' answered the code ''"),
        (
            "finish",
            [b"ended", b"BOGUS", b"", b"", b"", b"", b"ACTIVE", b""],
            "'finish' answered Status .*: a field is not one this library writes "
            "\\(KeyError: 'BOGUS'\\)",
        ),
    ],
    ids=["too many", "too few", "capacity", "odd pairs", "unknown code", "empty", "bad state"],
)
def test_an_answer_of_another_shape_is_an_error_naming_the_function(
    function: str, raw: list[bytes], message: str
) -> None:
    with pytest.raises(ProtocolError, match=f"^the Redis function {message}"):
        decode(function, raw)


def test_the_server_s_answer_of_another_shape_is_refused_as_it_comes(client: redis.Redis) -> None:
    raw = client.eval("return {'ok', 'one too many'}", 0)
    with pytest.raises(ProtocolError, match="'reserve_bytes' answered 'ok' with 2 fields"):
        decode("reserve_bytes", raw)


def test_a_script_that_leaves_a_field_out_fails_in_the_server_naming_it(
    client: redis.Redis,
) -> None:
    script = f"{prelude()}\nreturn answer('Capacity', {{code = 'ok', limit = 8}})"
    with pytest.raises(redis.ResponseError, match="Capacity answer without used"):
        client.eval(script, 0)


# -- each reason is worded once: the server writes what Python writes ---------------------------

_VALUES: dict[str, str | int] = {
    "late": "0.500 s",
    "boundary": "TOOL",
    "dimension": "tool_calls",
    "detail": "3 reached: Tool call 4 ('lookup') refused",
    "limit": 10**15,  # Lua's own conversion would write 1e+15
    "call": 4,
    "tool": "'lookup'",
    "n": 7,
    "used": 2**53 - 1,
    "reason": "CLIENT_DISCONNECTED",
    "hold": "$0.4",  # the money texts are given dollars already worded
    "settled": "$9007.199254740991",
    "held": "$1E-12",
    "run": "'diag'",  # a run ID is given as its repr
    "state": "BUDGET_EXHAUSTED",
}


@pytest.mark.parametrize("reason", REASON_TEXTS, ids=lambda reason: reason.name)
def test_each_reason_text_reads_the_same_in_lua_and_in_python(
    client: redis.Redis, reason: ReasonText
) -> None:
    values = {name: _VALUES[name] for name in reason.fields}
    # The numbers reach Lua as numbers, as the scripts' counts do.
    script = f"""{prelude()}
local values = {{}}
for i = 1, #ARGV, 3 do
  values[ARGV[i]] = ARGV[i + 2] == 'n' and tonumber(ARGV[i + 1]) or ARGV[i + 1]
end
return text('{reason.name}', values)"""
    argv = [
        part
        for name, value in values.items()
        for part in (name, value, "n" if isinstance(value, int) else "s")
    ]
    assert client.eval(script, 0, *argv).decode() == reason.format(**values)


def test_a_text_given_other_fields_than_its_own_is_refused(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="the tokens text needs used"):
        client.eval(f"{prelude()}\nreturn text('tokens', {{limit = 1}})", 0)
    tokens = next(reason for reason in REASON_TEXTS if reason.name == "tokens")
    with pytest.raises(ValueError, match=r"takes \['limit', 'used'\], was given \['limit'\]"):
        tokens.format(limit=1)


def _local_and_redis(store: RedisRunStore, run_id: str) -> Iterator[tuple[RunContext, ManualClock]]:
    for where in (None, store):
        clock = ManualClock()
        ctx = RunContext.create(
            session_id="s",
            run_id=run_id,
            limits=LIMITS,
            deadline=Deadline.at_ns(2 * _NS),
            clock=clock,
            store=where,
        )
        yield ctx, clock


def _model_twice(ctx: RunContext, _clock: ManualClock) -> None:
    ctx.reserve_model_call()
    ctx.reserve_model_call()


def _tool_twice(ctx: RunContext, _clock: ManualClock) -> None:
    ctx.reserve_tool_call("lookup")
    ctx.reserve_tool_call("lookup")


def _other_tool(ctx: RunContext, _clock: ManualClock) -> None:
    ctx.reserve_tool_call("fetch")
    ctx.reserve_tool_call("fetch")  # its own limit is 2, the total's 1


def _late(ctx: RunContext, clock: ManualClock) -> None:
    clock.advance_ns(2 * _NS + 250_000)
    ctx.reserve_bytes(1)


def _cancel(ctx: RunContext, _clock: ManualClock) -> None:
    ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    ctx.check(Boundary.GUARD)


def _tokens(ctx: RunContext, _clock: ManualClock) -> None:
    ctx.record_token_usage(input_tokens=4, output_tokens=7)
    ctx.check(Boundary.GUARD)


REFUSALS: dict[str, Callable[[RunContext, ManualClock], None]] = {
    "model_calls": _model_twice,
    "per_tool_calls": _tool_twice,
    "tool_calls": _other_tool,
    "run_bytes": lambda ctx, _: ctx.reserve_bytes(11),
    "tokens": _tokens,
    "deadline": _late,
    "cancelled": _cancel,
}


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refusal_reads_the_same_from_the_server_as_from_this_process(
    store: RedisRunStore, refusal: str
) -> None:
    messages = []
    for ctx, clock in _local_and_redis(store, f"refusal-{refusal}"):
        with pytest.raises(RunTerminated) as raised:
            REFUSALS[refusal](ctx, clock)
        termination = ctx.lifecycle.termination
        assert termination is not None
        messages.append((termination.state, termination.reason, str(raised.value)))
    local, server = messages
    assert server == local
