"""Tests of ``diagnosis_harness.conformance``: the spec parser, the report model and renderers, the
pytest plugin, the ``report`` command, the bundled suite and the wheel it ships in.

A package, so that its ``conftest`` is ``conformance.conftest``: mypy checks ``tests/`` as one
tree, and two top-level ``conftest`` modules (``tests/conftest.py`` and this directory's) would
clash.
"""
