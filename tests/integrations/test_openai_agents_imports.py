"""The openai-agents integration is imported only by its user, and says which extra it needs.

Each check runs in a fresh interpreter: in this one, other tests have imported the SDK.
"""

from __future__ import annotations

from fresh import run_fresh


def test_neither_the_core_nor_the_integrations_package_imports_openai_agents() -> None:
    code = """
        import sys
        import diagnosis_harness, diagnosis_harness.integrations
        module = "diagnosis_harness.integrations.openai_agents"
        print("agents" in sys.modules, module in sys.modules)
    """
    assert run_fresh(code) == "False False"


def test_without_the_sdk_the_error_names_the_extra_to_install() -> None:
    code = """
        import sys
        sys.modules["agents"] = None  # as if openai-agents were not installed
        try:
            import diagnosis_harness.integrations.openai_agents
        except ImportError as error:
            print(error)
    """
    assert "pip install 'diagnosis-harness[openai-agents]'" in run_fresh(code)
