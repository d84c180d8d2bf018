"""``Disagreement``: the runtime and the model (or the reference, or an invariant) disagree."""

from __future__ import annotations

__all__ = ["Disagreement", "disagree"]


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


def disagree(message: str, *, model: object = None, runtime: object = None) -> Disagreement:
    """A :class:`Disagreement` with each answer given shown as its ``str`` (``None``: not given)."""
    return Disagreement(
        message,
        model=None if model is None else str(model),
        runtime=None if runtime is None else str(runtime),
    )
