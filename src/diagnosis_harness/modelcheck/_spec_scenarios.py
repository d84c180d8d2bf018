"""The spec's requirements and scenarios the model checks exercise, named once.

Every check result names the (requirement, scenario) pairs it actually exercised, so a failure
is charged to those and nothing else. The names are the spec's, verbatim
(``specs/diagnosis-harness-run-context/spec.md``); the conformance suite's own constants in
``conformance/suite/_support.py`` are checked against the spec, and
``tests/modelcheck`` checks that these equal them.
"""

from __future__ import annotations

from typing import Final, TypeAlias

__all__ = [
    "BUDGET_WINS",
    "CAPACITY",
    "CLIENT_DISCONNECTS",
    "DEADLINE_BEFORE_TOOL",
    "PER_TOOL",
    "RETRY_CANCELLED",
    "RETRY_TOOL_FAILS",
    "RETRY_TRANSPORT",
    "SUCCESS_WINS",
    "TOKENS_EXCEED",
    "SpecScenario",
]

SpecScenario: TypeAlias = tuple[str, str]
"""A spec scenario as ``(requirement, scenario)``, both verbatim."""

LIFECYCLE: Final = "A Run SHALL have exactly one terminal outcome"
DEADLINE: Final = "Deadline and cancellation SHALL stop subsequent controlled work"
BUDGET: Final = "Run budgets SHALL be explicit, thread-safe, and observable"
RETRY: Final = "Harness retry SHALL be typed, bounded, and recorded"
PRIMITIVES: Final = (
    "Tool invocation key and Run capacity primitives SHALL be safe and store-independent"
)

SUCCESS_WINS: Final[SpecScenario] = (LIFECYCLE, "Success wins a terminal race")
BUDGET_WINS: Final[SpecScenario] = (LIFECYCLE, "Budget exhaustion wins a terminal race")
DEADLINE_BEFORE_TOOL: Final[SpecScenario] = (DEADLINE, "Deadline expires before a Tool call")
CLIENT_DISCONNECTS: Final[SpecScenario] = (DEADLINE, "Client disconnects")
PER_TOOL: Final[SpecScenario] = (BUDGET, "Per-Tool budget is exhausted")
TOKENS_EXCEED: Final[SpecScenario] = (BUDGET, "Actual Token usage exceeds the limit")
RETRY_TRANSPORT: Final[SpecScenario] = (RETRY, "Router transport failure succeeds on retry")
RETRY_TOOL_FAILS: Final[SpecScenario] = (RETRY, "Tool call fails")
RETRY_CANCELLED: Final[SpecScenario] = (RETRY, "Run is cancelled between attempts")
CAPACITY: Final[SpecScenario] = (PRIMITIVES, "Run byte limit would be exceeded")
