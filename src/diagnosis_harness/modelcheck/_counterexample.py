"""``Counterexample``: the steps a reader replays to see a model check fail.

Theory of operation. Whatever found the failure -- the exhaustive explorer (an event
``sequence``), the deterministic scheduler (a thread ``schedule``), a Hypothesis machine (its
shrunk ``hypothesis`` example) or Spin (a ``spin`` trail) -- it is told the same way: the steps
in order, the index of the step where the model and the runtime disagree (``None`` when the
failure is not one step's, a property refuted over a whole trail, say) with both answers there,
a one-line message, and how to replay it. :meth:`Counterexample.as_json` is the form the
conformance report and ``model-check --json`` carry; :meth:`Counterexample.text` is what a
failing test prints, its first line saying what went wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, final

__all__ = ["Counterexample", "CounterexampleKind", "Step"]

CounterexampleKind = Literal["sequence", "schedule", "hypothesis", "spin"]
KINDS: Final[tuple[CounterexampleKind, ...]] = ("sequence", "schedule", "hypothesis", "spin")


@final
@dataclass(frozen=True, slots=True)
class Step:
    """One step of a counterexample; ``model`` / ``runtime`` are set at the disagreement."""

    index: int
    action: str
    model: str | None = None
    runtime: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "action": self.action,
            "model": self.model,
            "runtime": self.runtime,
        }


@final
@dataclass(frozen=True, slots=True)
class Counterexample:
    """The shortest failing steps a check found, and where the model and the runtime disagree.

    Invariants: ``kind`` is one of :data:`KINDS`; ``steps[i].index == i``; ``disagreement`` is
    ``None`` or the index of a step; ``message`` is one line.
    """

    kind: CounterexampleKind
    message: str
    steps: tuple[Step, ...]
    disagreement: int | None
    replay: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if any(step.index != i for i, step in enumerate(self.steps)):
            raise ValueError("steps must be numbered 0, 1, 2, ... in order")
        if self.disagreement is not None and not 0 <= self.disagreement < len(self.steps):
            raise ValueError(f"disagreement {self.disagreement} is not the index of a step")
        if "\n" in self.message:
            raise ValueError("message must be one line")

    @classmethod
    def of(
        cls,
        kind: CounterexampleKind,
        message: str,
        actions: tuple[str, ...] | list[str],
        *,
        disagreement: int | None,
        model: str | None = None,
        runtime: str | None = None,
        replay: str,
    ) -> Counterexample:
        """Number ``actions`` and put both answers on the disagreeing step."""
        steps = tuple(
            Step(i, action, model, runtime) if i == disagreement else Step(i, action)
            for i, action in enumerate(actions)
        )
        first = message.strip().splitlines()[0] if message.strip() else "the check failed"
        return cls(kind, first, steps, disagreement, replay)

    @property
    def at(self) -> Step | None:
        """The disagreeing step, if one is named."""
        return None if self.disagreement is None else self.steps[self.disagreement]

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "steps": [step.as_json() for step in self.steps],
            "disagreement": self.disagreement,
            "replay": self.replay,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Counterexample:
        """The inverse of :meth:`as_json`."""
        steps = tuple(
            Step(int(s["index"]), str(s["action"]), s.get("model"), s.get("runtime"))
            for s in data["steps"]
        )
        return cls(data["kind"], data["message"], steps, data["disagreement"], data["replay"])

    def text(self) -> str:
        """The message, then the steps (``>`` marks the disagreement), then how to replay."""
        lines = [f"{self.message}", f"{self.kind} counterexample, {len(self.steps)} steps:"]
        for step in self.steps:
            mark = ">" if step.index == self.disagreement else " "
            lines.append(f" {mark} {step.index + 1:>3}. {step.action}")
            if step.index == self.disagreement and (step.model, step.runtime) != (None, None):
                lines.append(f"         model:   {step.model}")
                lines.append(f"         runtime: {step.runtime}")
        lines.append(f"replay: {self.replay}")
        return "\n".join(lines)
