"""``RedisCapacityCounter``: a run's capacity counter, shared by every process of the run.

The same contract as :class:`~diagnosis_harness.RunCapacityCounter` -- ``try_reserve(n)`` adds
``n`` only if the sum still fits the limit, all or nothing, and a rejection changes nothing --
with the check and the add one server-side script (``lua/capacity.lua``) on a key under the run's
hash tag, which expires with the run's other keys. The first counter made for a run sets its
limit; a counter made with another limit is refused, as a configuration error. A counter knows
no deadline: each round trip waits at most the store's timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import redis

from .._errors import RunStoreConflict
from .._validate import positive_int
from ._ops import OperationIds
from ._protocol import Capacity

if TYPE_CHECKING:
    from ._link import StoreLink
    from ._store import RunKeys

__all__ = ["RedisCapacityCounter"]


@final
class RedisCapacityCounter:
    """Reserves byte counts for one stored run, up to ``limit_bytes`` across every process.

    Made by :meth:`RedisRunStore.capacity_counter`. A store that does not answer raises
    :class:`~diagnosis_harness.RunStoreUnavailable` (nothing reserved); a call sent again
    (after a lost connection, or a reservation of the same ``n`` asked for again after one got
    no answer) is applied once.
    """

    __slots__ = ("_ids", "_keys", "_limit", "_link")

    def __init__(self, link: StoreLink, keys: RunKeys, limit_bytes: int) -> None:
        self._limit: Final = positive_int("limit_bytes", limit_bytes)
        self._link = link
        self._keys = keys
        self._ids = OperationIds()
        self._call(0)  # the limit is checked against the stored one now, not at first use

    def try_reserve(self, n: int) -> bool:
        """Reserve ``n`` bytes and return ``True`` if ``used + n <= limit``, else ``False``."""
        return self._call(positive_int("n", n)).code == "ok"

    @property
    def used(self) -> int:
        return self._call(0).used

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def remaining(self) -> int:
        return self._limit - self.used

    def _call(self, n: int) -> Capacity:
        write = ("capacity", n)
        op = self._ids.take(write) if n else ""  # n == 0 only reads
        try:
            answer = self._link.call(
                "capacity", self._keys, [self._keys.channel, op, 0, self._limit, n]
            )
        except redis.RedisError as error:
            if n:
                self._ids.unanswered(write, op)
            raise self._link.unavailable(f"capacity of run {self._keys.run_id!r}", error) from error
        if not isinstance(answer, Capacity):  # the only other answer it has: no such run
            raise self._link.unknown(self._keys.run_id)
        if answer.code == "limit":
            raise RunStoreConflict(
                self._link.name,
                f"the capacity counter of run {self._keys.run_id!r} has limit "
                f"{answer.limit} bytes, not {self._limit}",
            )
        return answer

    def __repr__(self) -> str:
        return f"RedisCapacityCounter(run_id={self._keys.run_id!r}, limit_bytes={self._limit})"
