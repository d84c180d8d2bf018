"""``Disagreement``: the runtime and the model (or the reference, or an invariant) disagree."""

from __future__ import annotations

__all__ = ["Disagreement"]


class Disagreement(AssertionError):
    """The runtime and the model (or the reference, or an invariant) disagree.

    An ``AssertionError``, so pytest and Hypothesis treat it as a failed check. ``model`` and
    ``runtime`` are the two answers, when the difference is one of answers (a state, a result, an
    error); ``None`` when the message alone says it (a broken invariant).
    """

    def __init__(self, message: str, *, model: str | None = None, runtime: str | None = None):
        super().__init__(message)
        self.message = message
        self.model = model
        self.runtime = runtime
