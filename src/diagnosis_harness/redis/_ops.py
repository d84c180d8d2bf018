"""Operation ids: every write an owner sends carries one, and the server applies an id once.

A write the store did not answer (a timeout, a lost connection) may have been applied or not;
nobody can tell until the server answers again. Its id is kept, and the owner's next write of
the same kind with the same arguments -- the caller asking again -- is sent with it: applied
already, the server answers as it did then and counts nothing more; not applied, it is applied
now. So a reservation whose answer was lost is never counted twice when it is asked for again.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from typing import final

__all__ = ["OperationIds"]


@final
class OperationIds:
    """One owner's ids, ``token:n``. Thread-safe: ``_unanswered`` (a write's kind and
    arguments -> ids of unanswered writes of them) under ``_lock``."""

    __slots__ = ("_count", "_lock", "_token", "_unanswered")

    def __init__(self) -> None:
        self._token = uuid.uuid4().hex
        self._count = itertools.count()
        self._lock = threading.Lock()
        self._unanswered: dict[tuple[object, ...], list[str]] = {}

    def new(self) -> str:
        """A fresh id, for a write that is never asked for again as such (an ending, say)."""
        return f"{self._token}:{next(self._count)}"

    def take(self, write: tuple[object, ...]) -> str:
        """The id for ``write``: one an unanswered ``write`` left, else a fresh one."""
        with self._lock:
            ids = self._unanswered.get(write)
            if ids:
                op_id = ids.pop()
                if not ids:
                    del self._unanswered[write]
                return op_id
        return self.new()

    def unanswered(self, write: tuple[object, ...], op_id: str) -> None:
        """``write`` sent with ``op_id`` got no answer: its id goes to the next such write."""
        with self._lock:
            self._unanswered.setdefault(write, []).append(op_id)
