"""Run trees on the Redis store: every semantic of ``ctx.child`` reads the same as in one process.

Each scenario below drives a tree -- a root made by ``new_run``, children by ``ctx.child`` -- and
writes down everything a user can observe: what each call returned or raised (the exception's
type and message), each run's termination (state, reason, instant, boundary), cancellation
reason, budget state and exhausted limit, each snapshot (children and ``capped_by`` included),
and every cancellation callback. It runs once on a run in this process and once on a
``RedisRunStore``; the two records must be equal, so a reason text, an ending, a rollup or a
refusal that the functions decide differently from ``LocalRun`` fails here. The callbacks must
run once per run, each after its descendants'.

What only the store has -- IDs claimed store-wide, attaching to a child by its ID, one slot per
tree, expiry -- is tested after the scenarios.
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeAlias

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnosis_harness import (
    Boundary,
    CancellationReason,
    Deadline,
    RunContext,
    RunFinished,
    RunState,
    RunStoreConflict,
    UnknownRun,
)
from diagnosis_harness.conformance.suite._support import limits, new_run, state
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._link import StoreLink
from diagnosis_harness.redis._protocol import Created
from diagnosis_harness.redis._run_keys import RunKeys
from diagnosis_harness.testing import ManualClock

from . import tree_workers
from .conftest import single_server
from .proxy import Proxy
from .workers import SESSION

if TYPE_CHECKING:
    from collections.abc import Callable

    from .server import RedisServer

D = Decimal
Root: TypeAlias = "Callable[..., RunContext]"


class Record:
    """What a scenario observed, in order; and the callbacks, as they ran."""

    def __init__(self) -> None:
        self.seen: list[object] = []
        self.callbacks: list[tuple[str, CancellationReason]] = []
        self.runs: dict[str, RunContext] = {}

    def watch(self, *contexts: RunContext) -> None:
        """Register a callback on each run that writes down its run and reason."""
        for ctx in contexts:
            self.runs[ctx.run_id] = ctx
            ctx.cancellation.register(self._keeper(ctx.run_id))

    def _keeper(self, name: str) -> Callable[[CancellationReason], None]:
        return lambda reason: self.callbacks.append((name, reason))

    def call(self, what: object, action: Callable[[], object]) -> object:
        """``action()``'s result, or the type and message of what it raised, written down."""
        try:
            result = action()
        except Exception as error:  # every refusal is an observation
            self.seen.append((what, type(error).__name__, str(error)))
            return None
        self.seen.append((what, "ok", _plain(result)))
        return result

    def end(self, ctx: RunContext) -> None:
        """The run's ending as a user reads it."""
        termination = ctx.lifecycle.termination
        self.seen.append(
            (
                ctx.run_id,
                ctx.parent_run_id,
                ctx.lifecycle.state,
                termination,
                ctx.cancellation.reason,
                ctx.budget.state,
                ctx.budget.exhausted,
            )
        )

    def usage(self, ctx: RunContext) -> None:
        self.seen.append((ctx.run_id, ctx.budget.snapshot()))


def _plain(result: object) -> object:
    """A result as comparable across stores: a money hold by what it holds."""
    max_cost = getattr(result, "max_cost", None)
    return ("hold", max_cost) if max_cost is not None else None


# -- the scenarios: each as the core's tests drive a tree ----------------------------------------


def rollup(root: Root, r: Record) -> None:
    parent = root(run_id="diag")
    logs, metrics = parent.child(run_id="logs"), parent.child(run_id="metrics")
    shard = logs.child(run_id="logs-shard-1")
    r.watch(parent, logs, metrics, shard)
    r.call("tool", lambda: logs.reserve_tool_call("grep"))
    r.call("model", logs.reserve_model_call)
    r.call("tool", lambda: metrics.reserve_tool_call("promql"))
    r.call("bytes", lambda: metrics.reserve_bytes(100))
    r.call("tokens", lambda: metrics.record_token_usage(input_tokens=10, output_tokens=3))
    r.call("tool", lambda: shard.reserve_tool_call("grep"))
    r.call("tool", lambda: parent.reserve_tool_call("grep"))
    for ctx in (parent, logs, metrics, shard):
        r.usage(ctx)
        r.end(ctx)


def cap_above_what_is_left(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(tool_calls=9, run_bytes=50))
    for _ in range(5):
        parent.reserve_tool_call("grep")
    child = parent.child(run_id="logs", limits=limits(tool_calls=6, run_bytes=10))
    r.watch(parent, child)
    r.usage(child)
    for _ in range(5):
        r.call("tool", lambda: child.reserve_tool_call("grep"))
    r.usage(parent)
    for ctx in (parent, child):
        r.end(ctx)


def child_cap_ends_the_child_alone(root: Root, r: Record) -> None:
    parent = root(run_id="diag")
    child = parent.child(run_id="logs", limits=limits(model_calls=1))
    sibling = parent.child(run_id="metrics")
    r.watch(parent, child, sibling)
    r.call("model", child.reserve_model_call)
    r.call("model", child.reserve_model_call)
    r.call("model", parent.reserve_model_call)
    r.call("model", sibling.reserve_model_call)
    for ctx in (parent, child, sibling):
        r.usage(ctx)
        r.end(ctx)


def parents_limit_exhausts_parent_and_cancels_sibling(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(tool_calls=2))
    logs, metrics = parent.child(run_id="logs"), parent.child(run_id="metrics")
    grandchild = logs.child(run_id="logs-1")
    nephew = metrics.child(run_id="metrics-1")
    r.watch(parent, logs, metrics, grandchild, nephew)
    r.call("tool", lambda: logs.reserve_tool_call("grep"))
    r.call("tool", lambda: metrics.reserve_tool_call("promql"))
    r.call("tool", lambda: grandchild.reserve_tool_call("grep"))  # the parent's third
    for ctx in (parent, logs, metrics, grandchild, nephew):
        r.end(ctx)
    r.usage(parent)


def per_tool_refusal_counts_nowhere(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(per_tool_calls=1))
    child = parent.child(run_id="logs", limits=limits(tool_calls=5))
    r.watch(parent, child)
    r.call("tool", lambda: child.reserve_tool_call("grep"))
    r.call("tool", lambda: child.reserve_tool_call("grep"))
    for ctx in (parent, child):
        r.usage(ctx)
        r.end(ctx)


def bytes_at_every_level(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(run_bytes=100))
    child = parent.child(run_id="logs", limits=limits(run_bytes=80))
    r.watch(parent, child)
    r.call("bytes", lambda: child.reserve_bytes(60))
    r.call("bytes", lambda: parent.reserve_bytes(30))
    r.call("bytes", lambda: child.reserve_bytes(20))
    for ctx in (parent, child):
        r.usage(ctx)
        r.end(ctx)


def tokens_past_the_parents_limit(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(total_tokens=100, input_tokens=70))
    logs = parent.child(run_id="logs", limits=limits(input_tokens=40))
    metrics = parent.child(run_id="metrics")
    r.watch(parent, logs, metrics)
    r.call("tokens", lambda: logs.record_token_usage(input_tokens=30, output_tokens=10))
    r.call("tokens", lambda: metrics.record_token_usage(input_tokens=30, output_tokens=20))
    r.call("tokens", lambda: logs.record_token_usage(input_tokens=20, output_tokens=0))
    for ctx in (parent, logs, metrics):
        r.usage(ctx)
        r.end(ctx)


def usage_past_two_levels(root: Root, r: Record) -> None:
    """A grandchild's usage past its parent's limit and the root's: each ends on the nearest."""
    parent = root(run_id="diag", budget=limits(output_tokens=50))
    child = parent.child(run_id="logs", limits=limits(output_tokens=20))
    grandchild = child.child(run_id="logs-1", limits=limits())  # its own limits: generous
    other = child.child(run_id="logs-2")
    r.watch(parent, child, grandchild, other)
    r.call("tokens", lambda: grandchild.record_token_usage(input_tokens=1, output_tokens=60))
    for ctx in (parent, child, grandchild, other):
        r.usage(ctx)
        r.end(ctx)


def money(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(cost=D("1.00")))
    child = parent.child(run_id="logs", limits=limits(cost=D("0.50")))
    free = parent.child(run_id="metrics")  # no money limit of its own: the parent's holds
    r.watch(parent, child, free)
    r.call(
        "hold", lambda: parent.reserve_tool_call("grep", max_cost=D("0.70")).settle(cost=D("0.70"))
    )
    hold: Any = r.call(
        "partial", lambda: child.reserve_model_call(max_cost=D("0.40"), min_cost=D("0.10"))
    )
    r.usage(parent)
    r.call("unpriced", free.reserve_model_call)
    r.call("settle", lambda: hold.settle(cost=D("0.20"), input_tokens=1, output_tokens=1))
    r.call("too dear", lambda: free.reserve_tool_call("promql", max_cost=D("0.20")))
    for ctx in (parent, child, free):
        r.usage(ctx)
        r.end(ctx)


def settle_after_the_child_ended(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(cost=D("1.00")))
    child = parent.child(run_id="logs")
    r.watch(parent, child)
    hold: Any = r.call("hold", lambda: child.reserve_model_call(max_cost=D("0.40")))
    r.call("succeed", child.lifecycle.succeed)
    r.call("settle", lambda: hold.settle(cost=D("0.25"), input_tokens=1, output_tokens=1))
    for ctx in (parent, child):
        r.usage(ctx)
        r.end(ctx)


def settle_past_the_parents_money_limit(root: Root, r: Record) -> None:
    parent = root(run_id="diag", budget=limits(cost=D("1.00")))
    logs, metrics = parent.child(run_id="logs"), parent.child(run_id="metrics")
    r.watch(parent, logs, metrics)
    hold: Any = r.call("hold", lambda: logs.reserve_model_call(max_cost=D("0.50")))
    r.call("hold", lambda: metrics.reserve_tool_call("promql", max_cost=D("0.40")))
    r.call("settle", lambda: hold.settle(cost=D("0.70"), input_tokens=1, output_tokens=1))
    for ctx in (parent, logs, metrics):
        r.usage(ctx)
        r.end(ctx)


def _parent_ending(ending: str) -> Callable[[Root, Record], None]:
    def scenario(root: Root, r: Record) -> None:
        clock = ManualClock()
        parent = root(run_id="diag", clock=clock, timeout=10)
        child = parent.child(run_id="logs")
        grandchild = child.child(run_id="logs-1")
        done = parent.child(run_id="done")
        r.watch(parent, child, grandchild, done)
        r.call("done", done.lifecycle.succeed)
        if ending == "succeed":
            r.call(ending, parent.lifecycle.succeed)
        elif ending == "fail":
            r.call(ending, lambda: parent.lifecycle.fail("crashed"))
        elif ending == "cancel":
            r.call(ending, lambda: parent.cancellation.cancel(CancellationReason.SHUTDOWN))
        else:
            clock.advance(10)
            r.call(ending, lambda: parent.check(Boundary.GUARD))
        for ctx in (parent, child, grandchild, done):
            r.end(ctx)
            r.call("after", ctx.reserve_model_call)
        r.call("child of ended", lambda: parent.child(run_id="late"))
        r.call("child of ended", lambda: child.child(run_id="late"))
        r.usage(parent)

    scenario.__name__ = f"parent_{ending}_cascades"
    return scenario


def _child_ending(ending: str) -> Callable[[Root, Record], None]:
    def scenario(root: Root, r: Record) -> None:
        clock = ManualClock()
        parent = root(run_id="diag", clock=clock, timeout=30)
        child = parent.child(run_id="logs", timeout=5, limits=limits(model_calls=1))
        grandchild = child.child(run_id="logs-1")
        sibling = parent.child(run_id="metrics")
        r.watch(parent, child, grandchild, sibling)
        if ending == "succeed":
            r.call(ending, child.lifecycle.succeed)
        elif ending == "fail":
            r.call(ending, lambda: child.lifecycle.fail("no logs"))
        elif ending == "cancel":
            r.call(ending, lambda: child.cancellation.cancel(CancellationReason.USER_REQUESTED))
        elif ending == "deadline":
            clock.advance(5)
            r.call(ending, lambda: child.reserve_tool_call("grep"))
        else:
            r.call(ending, child.reserve_model_call)
            r.call(ending, grandchild.reserve_model_call)
        r.call("sibling", sibling.reserve_model_call)
        for ctx in (parent, child, grandchild, sibling):
            r.end(ctx)
        r.usage(parent)

    scenario.__name__ = f"child_{ending}_ends_alone"
    return scenario


def deadlines(root: Root, r: Record) -> None:
    clock = ManualClock()
    parent = root(run_id="diag", clock=clock, timeout=10)
    late = Deadline.at_ns(20_000_000_000)
    for name, kwargs in (
        ("a", {"timeout": 5}),
        ("b", {"timeout": 60}),
        ("c", {}),
        ("d", {"deadline": late}),
    ):
        r.seen.append((name, parent.child(run_id=name, **kwargs).deadline))


def cancel_refuses_parent_ended(root: Root, r: Record) -> None:
    parent = root(run_id="diag")
    child = parent.child(run_id="logs")
    r.call("cancel", lambda: child.cancellation.cancel(CancellationReason.PARENT_ENDED))
    r.end(child)


SCENARIOS = [
    rollup,
    cap_above_what_is_left,
    child_cap_ends_the_child_alone,
    parents_limit_exhausts_parent_and_cancels_sibling,
    per_tool_refusal_counts_nowhere,
    bytes_at_every_level,
    tokens_past_the_parents_limit,
    usage_past_two_levels,
    money,
    settle_after_the_child_ended,
    settle_past_the_parents_money_limit,
    *(_parent_ending(e) for e in ("succeed", "fail", "cancel", "deadline")),
    *(_child_ending(e) for e in ("succeed", "fail", "cancel", "deadline", "budget")),
    deadlines,
    cancel_refuses_parent_ended,
]


def _record(scenario: Callable[[Root, Record], None], store: RedisRunStore | None) -> Record:
    record = Record()

    def root(**kwargs: Any) -> RunContext:
        return new_run(**kwargs) if store is None else new_run(store=store, **kwargs)

    scenario(root, record)
    return record


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_tree_on_redis_reads_the_same_as_in_this_process(
    scenario: Callable[[Root, Record], None], store: RedisRunStore
) -> None:
    local = _record(scenario, None)
    stored = _record(scenario, store)
    assert stored.seen == local.seen
    for record in (local, stored):
        counts = collections.Counter(name for name, _ in record.callbacks)
        assert all(n == 1 for n in counts.values()), record.callbacks  # once each
        order = [name for name, _ in record.callbacks]
        for name in order:  # each run's after every one of its descendants'
            ctx = record.runs[name]
            ancestor = ctx.parent_run_id
            while ancestor is not None:
                if ancestor in order:
                    assert order.index(ancestor) > order.index(name), record.callbacks
                ancestor = record.runs[ancestor].parent_run_id
    assert sorted(stored.callbacks, key=str) == sorted(local.callbacks, key=str)


# -- what only the store has ---------------------------------------------------------------------


def _tree(store: RedisRunStore, **parent_limits: Any) -> tuple[RunContext, RunContext, RunContext]:
    parent = new_run(run_id="diag", budget=limits(**parent_limits), store=store)
    return parent, parent.child(run_id="logs"), parent.child(run_id="metrics")


def test_any_run_id_the_store_holds_is_refused_and_nothing_is_made(
    store: RedisRunStore, client: redis.Redis
) -> None:
    parent, logs, _ = _tree(store)
    other = new_run(run_id="other", store=store)
    for ctx, taken in ((logs, "diag"), (logs, "logs"), (logs, "metrics"), (other, "logs")):
        with pytest.raises(RunStoreConflict, match=f"run {taken!r} exists already"):
            ctx.child(run_id=taken)  # the root (a cycle), itself, a sibling, another tree's
    with pytest.raises(RunStoreConflict, match="run 'metrics' exists already"):
        new_run(run_id="metrics", store=store)  # a root may not take a child's ID either
    assert list(parent.budget.snapshot().children) == ["logs", "metrics"]
    assert not logs.budget.snapshot().children
    assert not other.budget.snapshot().children
    assert client.hget(RunKeys.of(store.namespace, "logs").index, "root") == b"diag"


def test_a_child_of_an_ended_run_is_refused_and_its_id_stays_free(
    store: RedisRunStore, client: redis.Redis
) -> None:
    parent, _, _ = _tree(store)
    parent.lifecycle.succeed()
    with pytest.raises(RunFinished) as refused:
        parent.child(run_id="late")
    assert refused.value.termination == parent.lifecycle.termination
    assert list(parent.budget.snapshot().children) == ["logs", "metrics"]
    assert client.exists(RunKeys.of(store.namespace, "late").index) == 0  # the claim dropped
    assert new_run(run_id="late", store=store).run_id == "late"


def test_a_foreign_store_is_refused(store: RedisRunStore, client: redis.Redis) -> None:
    parent, _, _ = _tree(store)
    other = RedisRunStore(client, namespace=store.namespace)
    try:
        with pytest.raises(ValueError, match="store must be the parent's store"):
            parent.child(run_id="x", store=other)
        assert parent.child(run_id="x", store=store).run_id == "x"
    finally:
        other.close()


def test_a_crash_between_the_claim_and_the_child_leaves_the_id_taken_until_it_expires(
    store: RedisRunStore, client: redis.Redis
) -> None:
    """A creator that stops after claiming the ID (the index under the ID's own tag) and before
    writing the child under the root's: the ID is refused, an attach finds no run, and the claim
    expires on its own, the child's deadline plus the store's expire_after after it was made."""
    parent, _, _ = _tree(store)
    keys = RunKeys.of(store.namespace, "orphan", "diag")
    link = StoreLink(client, "test")
    try:
        claim = keys.claim
        answer = link.call("claim", claim, [claim.channel, "crashed", 0, "diag", 5_000, "claim"])
    finally:
        link.close()
    assert answer == Created("ok")
    with pytest.raises(RunStoreConflict, match="run 'orphan' exists already"):
        parent.child(run_id="orphan")
    with pytest.raises(UnknownRun, match="no run 'orphan' is stored"):
        RunContext.attach(session_id=parent.session_id, run_id="orphan", store=store)
    assert 0 < client.pttl(keys.index) <= 5_000
    assert list(parent.budget.snapshot().children) == ["logs", "metrics"]


def test_a_write_sent_again_is_applied_once_at_every_level(
    store: RedisRunStore, client: redis.Redis
) -> None:
    """A reservation, a usage report or a settle whose answer was lost is sent again with the
    same operation id (the store's retry, or the next such call): the child's function finds the
    id among its own and changes nothing at any level."""
    parent, logs, _ = _tree(store)
    keys = RunKeys.of(store.namespace, "logs", "diag")
    link = StoreLink(client, "test")
    try:
        for function, args in (
            ("reserve_tool_call", ["grep", "'grep'", 0]),
            ("reserve_model_call", [0]),
            ("record_token_usage", [3, 4]),
            ("settle", ["MODEL", 0, 5, 1, 1]),
        ):
            for _ in range(2):
                link.call(function, keys, [keys.channel, f"{function}-1", 1, *args])
    finally:
        link.close()
    for usage in (parent.budget.snapshot(), logs.budget.snapshot()):
        assert (usage.tool_calls, usage.model_calls) == (1, 1)
        assert (usage.input_tokens, usage.output_tokens, usage.cost_units) == (4, 5, 5)


@pytest.mark.parametrize("step", [b"_claim", b"_create_child"])
def test_a_child_creation_whose_answer_was_lost_finds_its_own_work(
    fresh_server: RedisServer, step: bytes
) -> None:
    """The server ran a step of a child's creation -- the claim of its ID, or the child -- and
    the connection closed before the answer came back. The store sends it again with the same
    operation id: the step finds its own work, and the child is made once (no RunStoreConflict
    for an ID the creation claimed itself)."""
    proxy = Proxy(fresh_server.port)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=5.0)
    store = RedisRunStore(client, namespace="lost")
    try:
        parent = new_run(run_id="diag", store=store)
        proxy.lose_next_reply(step)
        child = parent.child(run_id="logs")
        assert proxy.connections >= 2  # the answer was lost: sent again on a new connection
        child.reserve_tool_call("grep")
        assert list(parent.budget.snapshot().children) == ["logs"]
        assert parent.budget.snapshot().tool_calls == 1
    finally:
        store.close()
        proxy.close()
        client.close()


def test_a_tree_lives_in_one_slot_and_expires_with_its_root(
    store: RedisRunStore, client: redis.Redis
) -> None:
    parent, logs, metrics = _tree(store)
    shard = logs.child(run_id="logs-1")
    shard.reserve_tool_call("grep")
    store.capacity_counter("logs", 100).try_reserve(10)  # a child's counter, found by its ID
    logs.lifecycle.succeed()  # ended, but its parent lives: kept, to be read
    keys = [
        k.decode() if isinstance(k, bytes) else k for k in client.scan_iter(f"{store.namespace}:*")
    ]
    indexes = {key for key in keys if key.endswith(":root")}
    assert indexes == {
        f"{store.namespace}:{{{name}}}:root" for name in ("logs", "metrics", "logs-1")
    }
    tree = sorted(set(keys) - indexes)
    assert all(key.startswith(f"{store.namespace}:{{diag}}:") for key in tree)  # one hash tag
    assert f"{store.namespace}:{{diag}}:logs:logs-1:run" not in tree  # IDs are one segment
    assert f"{store.namespace}:{{diag}}:logs-1:run" in tree
    assert all(client.pttl(key) == -1 for key in tree)  # the root is live: nothing expires
    assert [client.pttl(key) > 0 for key in indexes] == [True] * 3  # a claim always expires
    parent.lifecycle.succeed()
    assert state(metrics) is RunState.CANCELLED
    ttl = 86_400_000  # the store's expire_after, a day
    assert all(0 < client.pttl(key) <= ttl for key in tree), tree


@single_server  # its workers connect to the one server (tree_workers)
def test_a_child_made_and_used_in_another_process_is_attached_by_its_id(
    redis_server: RedisServer, store: RedisRunStore
) -> None:
    """A worker attaches to the root and gives it a child (whose deadline is the parent's, the
    sooner); this process attaches to the child by its ID alone and finds its parent, limits and
    usage, and the parent's ending reaches it."""
    parent = new_run(
        run_id="diag", budget=limits(tool_calls=9), store=store, timeout=600, session_id=SESSION
    )
    out = _SPAWN.Queue()
    (parent_id, child_limits, same_deadline), = _run_all(
        [(tree_workers.make_child, {"port": redis_server.port, "namespace": store.namespace,
                                     "parent_id": "diag", "child_id": "remote", "out": out})],
        out,
    )  # fmt: skip
    assert (parent_id, same_deadline) == ("diag", True)  # its own 3,600 s: the parent's is sooner
    child = RunContext.attach(session_id=parent.session_id, run_id="remote", store=store)
    assert child.parent_run_id == "diag"
    assert (
        (child.budget.limits.model_calls, child.budget.limits.tool_calls) == child_limits == (5, 6)
    )
    assert child.budget.snapshot().tool_calls == 2
    assert dict(child.budget.snapshot().capped_by) == {}  # 6 left of 6 here, 7 of 9 above
    assert parent.budget.snapshot().children["remote"].tool_calls == 2
    seen: list[CancellationReason] = []
    child.cancellation.register(seen.append)
    parent.cancellation.cancel(CancellationReason.USER_REQUESTED)
    assert seen == [CancellationReason.PARENT_ENDED]
    termination = child.lifecycle.termination
    assert termination is not None
    assert termination.reason == (
        "cancelled: ancestor run 'diag' ended CANCELLED: cancelled: USER_REQUESTED"
    )


# -- the figures, across processes --------------------------------------------------------


_SPAWN = multiprocessing.get_context("spawn")
_WAIT = 120.0


def _run_all(targets: list[tuple[Callable[..., None], dict[str, Any]]], out: Any) -> list[Any]:
    processes = [_SPAWN.Process(target=target, kwargs=kwargs) for target, kwargs in targets]
    for process in processes:
        process.start()
    results = [out.get(timeout=_WAIT) for _ in processes]
    for process in processes:
        process.join(_WAIT)
        assert process.exitcode == 0
    return results


@pytest.mark.version_independent
@pytest.mark.end_to_end
@single_server  # its workers connect to the one server (tree_workers)
def test_a_parent_cancelled_while_three_children_in_three_processes_are_mid_call(
    redis_server: RedisServer, store: RedisRunStore
) -> None:
    """Each child, in its own process with its parent attached there too, waits in its scope on
    a request in flight. The parent's cancel, here, cuts every one; each process runs each of
    its callbacks once, the child's before the parent's; nothing is granted afterwards."""
    parent = new_run(run_id="diag", store=store, timeout=600, session_id=SESSION)
    children = [parent.child(run_id=f"agent-{i}") for i in range(3)]
    here: list[str] = []

    def keeper(name: str) -> Callable[[CancellationReason], None]:
        return lambda _reason: here.append(name)

    for ctx in (parent, *children):
        ctx.cancellation.register(keeper(ctx.run_id))
    in_call = _SPAWN.Barrier(4)
    out = _SPAWN.Queue()
    where = {"port": redis_server.port, "namespace": store.namespace}
    processes = [
        _SPAWN.Process(
            target=tree_workers.child_mid_call,
            kwargs={**where, "child_id": child.run_id, "in_call": in_call, "out": out},
        )
        for child in children
    ]
    for process in processes:
        process.start()
    in_call.wait(_WAIT)  # every child is in its call
    assert parent.cancellation.cancel(CancellationReason.USER_REQUESTED)
    results = sorted(out.get(timeout=_WAIT) for _ in processes)
    for process in processes:
        process.join(_WAIT)
        assert process.exitcode == 0
    reason = "cancelled: ancestor run 'diag' ended CANCELLED: cancelled: USER_REQUESTED"
    assert results == [
        (
            f"agent-{i}",
            "RunCancelled",  # the scope cut the request in flight
            [("child", "parent_ended"), ("parent", "user_requested")],  # once each, child first
            "parent_ended",
            reason,
            False,  # nothing granted afterwards
        )
        for i in range(3)
    ]
    assert sorted(here[:3]) == ["agent-0", "agent-1", "agent-2"]
    assert here[3:] == ["diag"]  # this process too: each once, the children first
    usage = parent.budget.snapshot()
    assert usage.model_calls == 3  # one call each, none after the cancel
    assert {name: u.model_calls for name, u in usage.children.items()} == {
        f"agent-{i}": 1 for i in range(3)
    }


@pytest.mark.version_independent
@pytest.mark.end_to_end
@single_server  # its workers connect to the one server (tree_workers)
def test_two_children_in_two_processes_capped_at_6_under_a_parent_limit_of_9_get_exactly_9(
    redis_server: RedisServer, store: RedisRunStore
) -> None:
    for round_ in range(3):
        parent = new_run(
            run_id=f"diag-{round_}", budget=limits(tool_calls=9), store=store, session_id=SESSION
        )
        names = [f"a-{round_}", f"b-{round_}"]
        for name in names:
            parent.child(run_id=name, limits=limits(tool_calls=6))
        start = _SPAWN.Barrier(2)
        out = _SPAWN.Queue()
        where = {"port": redis_server.port, "namespace": store.namespace}
        granted = dict(
            _run_all(
                [
                    (tree_workers.child_asks, {**where, "child_id": name, "asks": 8,
                                               "start": start, "out": out})
                    for name in names
                ],
                out,
            )
        )  # fmt: skip
        usage = parent.budget.snapshot()
        assert sum(granted.values()) == 9 == usage.tool_calls
        assert max(granted.values()) <= 6
        assert {name: u.tool_calls for name, u in usage.children.items()} == granted
        assert state(parent) is RunState.BUDGET_EXHAUSTED  # the tenth ask passed its limit


# -- random sequences: the same on both stores ----------------------------------------------------

_RUNS = ("root", "a", "b", "a1")  # a1 is a's child; b is capped by the root alone
_OPS = st.one_of(
    st.tuples(st.just("model"), st.sampled_from(_RUNS), st.sampled_from([10, 30, 50]),
              st.sampled_from([None, 5])),
    st.tuples(st.just("tool"), st.sampled_from(_RUNS), st.sampled_from(["grep", "fetch"]),
              st.sampled_from([0, 20])),
    st.tuples(st.just("bytes"), st.sampled_from(_RUNS), st.integers(1, 40)),
    st.tuples(st.just("tokens"), st.sampled_from(_RUNS), st.integers(0, 30), st.integers(0, 30)),
    st.tuples(st.just("settle"), st.integers(0, 5), st.integers(0, 60), st.integers(0, 20)),
    st.tuples(st.just("end"), st.sampled_from(_RUNS),
              st.sampled_from(["succeed", "fail", "cancel", "check"])),
    st.tuples(st.just("advance"), st.sampled_from([1, 2, 4])),
)  # fmt: skip


def _step(
    r: Record,
    op: tuple[Any, ...],
    runs: dict[str, RunContext],
    holds: list[Any],
    clock: ManualClock,
) -> None:
    """One operation of a sequence on the tree ``runs``, written down in ``r``."""
    kind = op[0]
    if kind == "model":
        _, name, cents, least = op
        ctx = runs[name]
        max_cost, min_cost = D(cents) / 100, None if least is None else D(least) / 100
        hold = r.call(op, lambda: ctx.reserve_model_call(max_cost=max_cost, min_cost=min_cost))
        holds.append(hold)
    elif kind == "tool":
        _, name, tool, cents = op
        ctx = runs[name]
        holds.append(r.call(op, lambda: ctx.reserve_tool_call(tool, max_cost=D(cents) / 100)))
    elif kind == "bytes":
        r.call(op, lambda: runs[op[1]].reserve_bytes(op[2]))
    elif kind == "tokens":
        r.call(op, lambda: runs[op[1]].record_token_usage(input_tokens=op[2], output_tokens=op[3]))
    elif kind == "settle":
        live = [h for h in holds if h is not None and not h.settled]
        if live:
            hold = live[op[1] % len(live)]
            tokens = op[3] if hold.boundary is Boundary.MODEL else None  # a Tool call has none
            r.call(
                op,
                lambda: hold.settle(cost=D(op[2]) / 100, input_tokens=tokens, output_tokens=tokens),
            )
    elif kind == "end":
        ctx = runs[op[1]]
        endings: dict[str, Callable[[], object]] = {
            "succeed": ctx.lifecycle.succeed,
            "fail": lambda: ctx.lifecycle.fail("gave up"),
            "cancel": lambda: ctx.cancellation.cancel(CancellationReason.USER_REQUESTED),
            "check": lambda: ctx.check(Boundary.GUARD),
        }
        r.call(op, endings[op[2]])
    else:
        clock.advance(op[1])


def _sequence(ops: list[tuple[Any, ...]], prefix: str, store: RedisRunStore | None) -> Record:
    """``ops`` on a tree whose run IDs start with ``prefix``: what a user observes."""
    clock = ManualClock()
    r = Record()
    kwargs: dict[str, Any] = {} if store is None else {"store": store}
    root = new_run(
        run_id=f"{prefix}root",
        clock=clock,
        timeout=10,
        budget=limits(model_calls=4, tool_calls=6, per_tool_calls=4, input_tokens=60,
                      output_tokens=60, total_tokens=90, run_bytes=100, cost=D("0.60")),
        **kwargs,
    )  # fmt: skip
    a = root.child(
        run_id=f"{prefix}a",
        timeout=6,
        limits=limits(model_calls=3, tool_calls=4, per_tool_calls=2, input_tokens=40,
                      run_bytes=60, cost=D("0.35")),
    )  # fmt: skip
    b = root.child(run_id=f"{prefix}b")
    a1 = a.child(run_id=f"{prefix}a1", timeout=3, limits=limits(model_calls=2, output_tokens=25))
    runs = dict(zip(_RUNS, (root, a, b, a1), strict=True))
    r.watch(*runs.values())
    holds: list[Any] = []
    for op in ops:
        _step(r, op, runs, holds, clock)
        for ctx in runs.values():
            r.end(ctx)
    for ctx in runs.values():
        r.usage(ctx)
    return r


_examples = itertools.count()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_OPS, max_size=25))
def test_any_sequence_on_a_tree_reads_the_same_on_redis(
    ops: list[tuple[Any, ...]], store: RedisRunStore
) -> None:
    """Random reservations, holds and settles, usage, endings and time on a root, two children
    and a grandchild: after every step, every run reads the same on the store as in one process
    (results, refusals, terminations, budget states); at the end every snapshot."""
    prefix = f"x{next(_examples)}-"  # every example its own IDs: the store refuses reuse
    local = _sequence(ops, prefix, None)
    stored = _sequence(ops, prefix, store)
    assert stored.seen == local.seen
    assert sorted(stored.callbacks, key=str) == sorted(local.callbacks, key=str)
