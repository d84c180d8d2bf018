"""The stall matrix's figures as a table, printed by ``pytest tests/integrations --stall-table``.

Each cell of ``test_stall_matrix.py`` records one :class:`CellResult` in the session's stash; the
``--stall-table`` option (``conftest.py``) prints them at the end of the run as the Markdown table
``docs/guides/stalls.md`` publishes. A cell is printed whether it passed or not, so the table of
code that fails the matrix can be printed too (the "before" figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

__all__ = ["ADAPTERS", "ENDINGS", "RESULTS", "STALLS", "CellResult", "table"]

# The rows and columns, in the order the table prints them; the ids are the test's cell ids.
ADAPTERS = {
    "openai": "governed `OpenAI`",
    "openai-async": "governed `AsyncOpenAI`",
    "anthropic": "governed `Anthropic`",
    "anthropic-async": "governed `AsyncAnthropic`",
    "pydantic-ai": "pydantic-ai `HarnessCapability`",
    "openai-agents": "openai-agents `run_governed`",
}
STALLS = {
    "request": "model request",
    "stream": "stream, after 2 events",
    "async-tool": "async tool",
    "sync-tool": "sync tool",
}
ENDINGS = {
    "deadline": "the deadline",
    "thread-cancel": "cancel, another thread",
    "process-cancel": "cancel, another process (Redis)",
}


@dataclass(frozen=True, slots=True)
class CellResult:
    """How one cell ended: ``late`` seconds after its deadline or cancel (``None``: it hung)."""

    late: float | None
    hung_after: float
    ok: bool
    note: str = ""

    def cell(self) -> str:
        figure = f"> {self.hung_after:.0f} s" if self.late is None else f"{self.late:+.3f} s"
        if self.ok:
            return figure
        return f"**{figure}** ✗ {self.note}".rstrip()


RESULTS = pytest.StashKey[dict[tuple[str, str, str], CellResult]]()


def table(results: dict[tuple[str, str, str], CellResult]) -> str:
    """The Markdown table: one row per adapter and stall, one column per way the run ends."""
    header = ["adapter", "what stalls", *ENDINGS.values()]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for adapter, adapter_name in ADAPTERS.items():
        for stall, stall_name in STALLS.items():
            cells = [
                results[adapter, stall, ending].cell()
                if (adapter, stall, ending) in results
                else "not run"
                for ending in ENDINGS
            ]
            if all(cell == "not run" for cell in cells):
                continue
            lines.append("| " + " | ".join([adapter_name, stall_name, *cells]) + " |")
    return "\n".join(lines)
