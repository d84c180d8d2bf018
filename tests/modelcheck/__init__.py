"""Tests of ``diagnosis_harness.modelcheck``: the explorer, the Hypothesis stateful machines, the
transition coverage, the planted defects, the deterministic scheduler and its races, Spin, and
the ``model-check`` command.

A package, so that its ``conftest`` is ``modelcheck.conftest``: mypy checks ``tests/`` as one
tree, and two top-level ``conftest`` modules (``tests/conftest.py`` and this directory's) would
clash.
"""
