"""Fixtures shared by every directory of ``tests/`` (the Hypothesis profiles are in the root
``conftest.py``, which the bundled suite in ``src/`` shares too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from racing import eager_switching

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def eager_thread_switching() -> Iterator[None]:
    """Make the interpreter switch threads far more often, so races would actually interleave.

    Not autouse: a module of racing tests opts in with
    ``pytestmark = pytest.mark.usefixtures("eager_thread_switching")``, a test by taking it.
    """
    with eager_switching():
        yield
