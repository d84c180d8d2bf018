"""Tests of the conformance plugin, the ``report`` command and the bundled suite.

A package, so that its ``conftest`` is ``report.conftest`` (mypy checks ``tests/`` as one tree,
and a second top-level ``conftest`` module would clash with ``tests/stateful/conftest.py``).
"""
