"""Why the runtime walks its tables under its own lock and never shares a python-statemachine model.

python-statemachine 3.2's ``send()`` is not safe from two threads. It puts the event on the
instance's queue and only *try*-locks the processing loop: a ``send()`` that finds another thread
inside the loop returns at once, leaving its event to that thread. The other thread then processes
it -- and once the machine is in a final state it drops the queued event without a word. So a
racer's ``send()`` can return normally although the other event won, the loser's
``TransitionNotAllowed`` can surface in the winner's thread, and an event can stay stranded on the
queue. The lifecycle's contract is the opposite: the one attempt that changed the outcome knows it
(``FinishResult.changed``), every other attempt is told it lost, and the callbacks run once.

So the runtime never calls a model: :meth:`~diagnosis_harness._machine.MachineTable.take` does a
locked dict lookup over the generated table (about 0.3 µs instead of about 95 µs per ``send()``),
under the run's lock that cancellation and the budget share, and the python-statemachine models
generated from the same tables are only the tests' oracle, each used from one thread.

The test that can fail is :func:`test_no_runtime_module_uses_python_statemachine`: it keeps the
runtime away from the models. The reproduction beside it shows the anomaly with real threads (it
shows up in most rounds once the switch interval is lowered) and reports what else it saw.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from statemachine import StateMachine
from statemachine.exceptions import TransitionNotAllowed

import diagnosis_harness
from diagnosis_harness import BudgetLimits, ManualClock, RunContext
from diagnosis_harness._generated.models import LifecycleModel
from diagnosis_harness._generated.tables import BudgetState, RunState

if TYPE_CHECKING:
    from collections.abc import Iterator

    from diagnosis_harness._generated.models import LifecycleEventName

pytestmark = pytest.mark.model_check

PACKAGE = Path(diagnosis_harness.__file__).parent
# The generated models are the oracle; the model checks and the code generator use them on
# purpose. Everything else is the runtime.
NOT_RUNTIME = ("_generated", "modelcheck", "codegen")
BOUND = 30.0  # seconds before a barrier or a join calls a racer stuck


def _runtime_sources() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in NOT_RUNTIME
    )


def _imports_of_models(path: Path, root: Path = PACKAGE) -> list[str]:
    """Every import in ``path`` of python-statemachine or of the generated models."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        hits = [
            name
            for name in names
            if name.split(".")[0] == "statemachine" or name.endswith("_generated.models")
        ]
        if hits:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {hits[0]}")
    return found


def _reachable(root: object) -> Iterator[object]:
    """Every object reachable from ``root`` through the library's own attributes and containers."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, dict):
            todo.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            todo.extend(obj)
        elif hasattr(obj, "__self__") and callable(obj):  # a bound method: its object
            todo.append(obj.__self__)
        elif type(obj).__module__.startswith("diagnosis_harness"):
            slots = {name for cls in type(obj).__mro__ for name in getattr(cls, "__slots__", ())}
            todo.extend(getattr(obj, name) for name in slots if hasattr(obj, name))
            todo.extend(getattr(obj, "__dict__", {}).values())


def test_the_scan_sees_every_form_of_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import threading\n"
        "import statemachine\n"
        "from statemachine.exceptions import TransitionNotAllowed\n"
        "from ._generated.models import LifecycleModel\n"
        "from ._generated import models, tables\n"
        "def late():\n"
        "    from statemachine import StateMachine\n",
        encoding="utf-8",
    )
    found = _imports_of_models(source, tmp_path)
    assert [line.split(":")[1] for line in found] == ["2", "3", "4", "5", "7"]


def test_no_runtime_module_uses_python_statemachine() -> None:
    sources = _runtime_sources()
    assert PACKAGE / "_context.py" in sources
    assert PACKAGE / "_machine.py" in sources
    assert [line for path in sources for line in _imports_of_models(path)] == []

    # Importing the library loads neither python-statemachine nor the models.
    probe = (
        "import json, sys; import diagnosis_harness, diagnosis_harness.testing; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] == 'statemachine' or m.endswith('_generated.models'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(loaded.stdout) == []

    # A run holds no model instance: its machines are enum states of the generated tables.
    limit = 10
    ctx = RunContext.create(
        session_id="s",
        run_id="r",
        limits=BudgetLimits(
            model_calls=limit,
            tool_calls=limit,
            per_tool_calls=limit,
            input_tokens=limit,
            output_tokens=limit,
            total_tokens=limit,
            run_bytes=limit,
        ),
        clock=ManualClock(),
        timeout=1,
    )
    ctx.cancellation.register(lambda _reason: None)
    reachable = list(_reachable(ctx))
    assert not [obj for obj in reachable if isinstance(obj, StateMachine)]
    assert RunState.RUNNING in reachable
    assert BudgetState.ACTIVE in reachable


def _two_sends(model: LifecycleModel) -> dict[str, str]:
    """``succeed`` and ``fail`` sent to one model from two threads released by one barrier."""
    barrier = threading.Barrier(2)
    out: dict[str, str] = {}

    def send(name: LifecycleEventName) -> None:
        try:
            barrier.wait(BOUND)
            model.send(name)
        except TransitionNotAllowed as error:
            out[name] = f"refused {error.event.id if error.event else None}"
        except BaseException as error:  # reported by the assertion below
            out[name] = f"raised {error!r}"
        else:
            out[name] = "returned"

    threads = [threading.Thread(target=send, args=(name,)) for name in ("succeed", "fail")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert not any(thread.is_alive() for thread in threads), "a racer is stuck"
    return out


def test_two_threads_sending_to_one_model_can_both_return_normally() -> None:
    """Reproduction: both ``send()`` calls return normally although one event lost.

    Sequentially exactly one of the two raises ``TransitionNotAllowed``. Shared across threads,
    the event of the racer that found the loop busy is processed by the other racer and dropped
    in the final state: its ``send()`` returned normally, yet the run is in the other state.
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    seen: Counter[str] = Counter()
    rounds = 0
    try:
        while rounds < 500:
            rounds += 1
            model = LifecycleModel()
            out = _two_sends(model)
            assert set(out.values()) <= {"returned", "refused succeed", "refused fail"}, out
            state = model.model_state.name
            if list(out.values()) == ["returned", "returned"]:
                seen["both returned"] += 1
            elif any(out[name] not in ("returned", f"refused {name}") for name in out):
                seen["a refusal surfaced in the other thread"] += 1
            else:
                seen["sequential"] += 1
            if not model._engine.external_queue.is_empty():
                seen["an event stranded on the queue"] += 1
            seen[f"ended {state}"] += 1
    finally:
        sys.setswitchinterval(previous)
    print(f"python-statemachine, two threads, {rounds} rounds: {dict(seen)}")  # -rP shows it
    assert seen["both returned"] > 0, (
        f"in {rounds} rounds no send() returned normally for a lost event: {dict(seen)}"
    )
