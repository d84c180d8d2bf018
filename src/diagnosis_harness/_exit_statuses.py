"""The one way a command's ``--help`` lists its exit statuses (``report``, ``model-check``)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["exit_status_lines"]


def exit_status_lines(statuses: Mapping[int, str]) -> list[str]:
    """``exit status:`` and one entry per status, its meaning wrapped under it at 72 columns."""
    lines = ["exit status:"]
    for status, meaning in statuses.items():
        wrapped = textwrap.wrap(meaning, width=72)
        lines.append(f"  {status:<5}{wrapped[0]}")
        lines.extend(f"       {line}" for line in wrapped[1:])
    return lines
