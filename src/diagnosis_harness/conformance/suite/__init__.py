"""The conformance suite: one home for the example test of every scenario of the spec.

``diagnosis-harness report`` runs this package under pytest with the conformance plugin
(:mod:`diagnosis_harness.conformance._plugin`) and writes ``reports/conformance.{json,md,html}``;
the repository's own ``pytest`` collects it too (it is in ``testpaths``). It ships in the wheel, so
the report can be made from an installed package, outside any checkout, against the spec shipped
with it (:mod:`diagnosis_harness.conformance._bundle`).

Every test here carries ``@pytest.mark.spec(requirement, scenario)`` with the spec's names
verbatim, and needs only ``diagnosis_harness`` (``diagnosis_harness.testing`` for the fakes) and
pytest -- no SDK, no PyYAML, no ``tests/`` helper. One module per requirement:

=============================  ==================================================================
``test_run_context.py``        RunContext SHALL be explicit and structurally immutable
``test_deadline_and_...``      Deadline and cancellation SHALL stop subsequent controlled work
``test_budgets.py``            Run budgets SHALL be explicit, thread-safe, and observable
``test_terminal_outcome.py``   A Run SHALL have exactly one terminal outcome
``test_harness_retry.py``      Harness retry SHALL be typed, bounded, and recorded
``test_hidden_retry.py``       Spring AI hidden retry SHALL be disabled
``test_keys_and_capacity.py``  Tool invocation key and Run capacity primitives SHALL be safe ...
``test_core_independence.py``  Harness Core SHALL remain independent from current runtime ...
=============================  ==================================================================

Model checks (the stateful machines, the deterministic scheduler, Spin) belong in
:mod:`.model_checks`, as thin wrappers over :mod:`diagnosis_harness.modelcheck` marked
``@pytest.mark.model_check`` as well as ``@pytest.mark.spec(...)``.

``suite.ini`` is the pytest configuration ``diagnosis-harness report`` passes with ``-c``, so that
no configuration file of the directory the command runs in (or above the installed package)
applies; it is deliberately not named ``pytest.ini``, so that running one of these files by path
from a checkout still uses the repository's configuration.
"""
