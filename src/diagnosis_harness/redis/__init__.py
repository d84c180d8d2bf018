"""One run across many processes: a run store in Redis (the ``redis`` extra, on redis-py).

``RunContext.create(..., store=RedisRunStore(client, namespace=...))`` publishes a run in Redis;
``RunContext.attach(session_id=..., run_id=..., store=...)`` opens it in any other process. The
run means what it means in one process (``docs/workers.md``): every operation is one server-side
script, the first ending wins everywhere, every attached process runs its own callbacks exactly
once, and a store that does not answer refuses work with ``RunStoreUnavailable`` -- by the run's
deadline at the latest: no round trip to Redis outlives the run.
"""

from __future__ import annotations

try:
    import redis as _redis_py  # noqa: F401  # here, so that a missing one names the extra
except ImportError as error:
    if error.name != "redis":
        raise  # redis-py is there but broken (one of its own imports): not "not installed"
    from ..integrations._extras import missing_extra

    raise missing_extra("redis", "redis", "diagnosis_harness.redis") from error

from ._capacity import RedisCapacityCounter
from ._store import RedisRunStore

__all__ = ["RedisCapacityCounter", "RedisRunStore"]
