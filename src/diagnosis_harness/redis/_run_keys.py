"""``RunKeys``: where a run's state lives in Redis -- its tree's root's hash tag, one slot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from .._keys import safe_segment

__all__ = ["RunKeys"]

_PARTS: Final = ("run", "tools", "ops", "capacity", "children")  # as lua/common.lua has them


@final
@dataclass(frozen=True, slots=True)
class RunKeys:
    """The keys of one run, all under its tree's root's hash tag (one Cluster slot per tree).

    A root's: ``{namespace}:{{run_id}}:{part}``. A child's: ``{namespace}:{{root_id}}:{run_id}:
    {part}`` (run IDs are safe segments, without ``:``, so the two never meet). ``index``:
    ``{namespace}:{{run_id}}:root``, under the run's *own* tag -- where a child's creation claims
    its ID and records its root, so that an attach by the child's ID finds the tree, and where
    a root's creation looks for an ID a child holds.
    """

    namespace: str
    run_id: str
    root_id: str
    run: str
    channel: str
    index: str
    all: tuple[str, ...]  # the scripts' KEYS, in the order common.lua names them

    @classmethod
    def of(cls, namespace: str, run_id: str, root_id: str | None = None) -> RunKeys:
        safe_segment("run_id", run_id)
        root = run_id if root_id is None else safe_segment("root_id", root_id)
        tree = f"{namespace}:{{{root}}}"
        base = tree if root == run_id else f"{tree}:{run_id}"
        keys = tuple(f"{base}:{part}" for part in _PARTS)
        return cls(
            namespace=namespace,
            run_id=run_id,
            root_id=root,
            run=keys[0],
            channel=f"{base}:ended",
            index=f"{namespace}:{{{run_id}}}:root",
            all=keys,
        )

    @property
    def claim(self) -> RunKeys:
        """The keys a root of this run's ID would have: a child's claim of its ID is sent on
        them (``claim.lua``), in the slot of the ID's own tag."""
        return RunKeys.of(self.namespace, self.run_id)
