"""Model checks of the conformance suite: thin wrappers over :mod:`diagnosis_harness.modelcheck`.

Put one ``test_<check>.py`` here per check (the stateful machines, the deterministic scheduler's
schedules, Spin), each test marked ``@pytest.mark.model_check`` and
``@pytest.mark.spec(requirement, scenario)`` for every scenario it shows. A check that records
transition coverage takes the session fixture ``transition_coverage`` (provided by the
conformance plugin); its counts go into the report's per-row coverage. A check needing a tool
the wheel does not bring (Spin) should skip with the reason when the tool is missing: a skipped
model check leaves the scenario to its example test rather than failing the report.
"""
