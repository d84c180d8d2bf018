"""``examples/diagnose_incident.py`` as a user runs it: a fresh interpreter, offline and live.

Offline, its output must show what the README says it shows: a model retry recorded in the
journal, the per-tool limit refusing a call before it runs, the deadline cutting a request in
flight, and each run's termination. Live, it goes through the environment variables a user sets
(``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OPENAI_MODEL``) to the loopback provider, which
must have seen exactly the attempts the script printed. Both are ``end_to_end`` (a fresh
interpreter) and ``version_independent``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")

from .loopback import OPENAI_PATH, LoopbackServer, Reply, ToolCall

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "diagnose_incident.py"
RESERVED = re.compile(
    r"model calls reserved: (\d+) \(triage attempts (\d+) \+ agent requests (\d+)\)"
)
# A fresh interpreter that imports pydantic-ai is slow on a busy machine; this only bounds a hang.
SUBPROCESS_BOUND_S = 300


def _environment(**overrides: str) -> dict[str, str]:
    """This environment without the provider's and proxies' variables, plus ``overrides``."""
    dropped = {"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_ORG_ID"}
    dropped |= {f"{name}_PROXY" for name in ("HTTP", "HTTPS", "ALL")}
    env = {k: v for k, v in os.environ.items() if k.upper() not in dropped}
    return env | overrides


def _run_script(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_BOUND_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _incidents(output: str) -> dict[str, str]:
    """The output of each incident, by run id."""
    parts = re.split(r"^== (incident-\d+): ", output, flags=re.MULTILINE)[1:]
    return dict(zip(parts[::2], parts[1::2], strict=True))


def _reserved(incident: str) -> tuple[int, int, int]:
    match = RESERVED.search(incident)
    assert match is not None, incident
    total, triage, agent = (int(n) for n in match.groups())
    assert total == triage + agent
    return total, triage, agent


def _termination(incident: str) -> str:
    [line] = [line for line in incident.splitlines() if line.startswith("termination: ")]
    return line.removeprefix("termination: ")


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_offline_it_shows_a_model_retry_the_per_tool_limit_and_the_deadline() -> None:
    incidents = _incidents(_run_script(_environment()))
    assert list(incidents) == ["incident-1", "incident-2", "incident-3"]

    retry = incidents["incident-1"]
    assert (
        "triage  harness retry [intent_router]: attempt 1 failed (SERVER_ERROR); "
        "attempt 2 succeeded; stop: SUCCEEDED"
    ) in retry
    assert _reserved(retry) == (4, 2, 2)
    for tool in ("logs", "metrics", "deploys"):
        assert f"  tool {tool}('checkout') ran" in retry
    assert _termination(retry) == "SUCCESS: the agent run produced its final output"

    limit = incidents["incident-2"]
    assert re.findall(r"tool logs\('(\w+)'\) ran", limit) == ["checkout", "payments"]
    assert "inventory" not in limit  # the third logs call never started
    assert "BudgetExhausted (PER_TOOL_CALLS)" in limit
    # The journal names the Tool each execution ran.
    assert (
        "tools   harness retry [tool_call] Tool 'logs': attempt 1 failed (BUDGET_EXHAUSTED); "
        "stop: NOT_RETRYABLE"
    ) in limit
    assert _termination(limit).startswith(
        "BUDGET_EXHAUSTED: per_tool_calls limit 2 for Tool 'logs' reached"
    )

    deadline = incidents["incident-3"]
    assert deadline.startswith("checkout down (the deadline)\ndeadline 1 s;")
    assert "RunTimedOut" in deadline
    # The second model request was reserved and sent, and never answered: the deadline cut it.
    assert "2 model request(s), one attempt each, 1 answered" in deadline
    # How far past the deadline, in seconds, and the boundary of the request it cut.
    assert re.fullmatch(
        r"TIMED_OUT: deadline exceeded: \d+\.\d+ s past it when the MODEL boundary checked",
        _termination(deadline),
    )


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_live_the_endpoint_sees_exactly_the_attempts_printed(loopback: LoopbackServer) -> None:
    """The env-var path against the loopback provider: a 500 the harness retries, an answer
    asking for the three tools, a conclusion. The server's request count is the script's."""
    tools = tuple(
        ToolCall(name, {"service": "checkout"}, id=f"call_{name}")
        for name in ("logs", "metrics", "deploys")
    )
    loopback.script(
        Reply(status=500),
        Reply(text="latency"),
        Reply(text="", tool_calls=tools),
        Reply(text="roll back checkout v42"),
    )
    env = _environment(
        OPENAI_API_KEY="test-key-not-a-secret",
        OPENAI_BASE_URL=loopback.openai_url,
        OPENAI_MODEL="loopback-model",
    )
    output = _run_script(env)
    assert f"endpoint {loopback.openai_url}/, model loopback-model" in output
    [incident] = _incidents(output).values()
    assert "attempt 1 failed (SERVER_ERROR); attempt 2 succeeded; stop: SUCCEEDED" in incident
    total, triage, agent = _reserved(incident)
    assert (triage, agent) == (2, 2)
    seen = loopback.requests
    assert len(seen) == total
    assert {(request.path, request.body["model"]) for request in seen} == {
        (OPENAI_PATH, "loopback-model")
    }
    assert {request.headers["authorization"] for request in seen} == {
        "Bearer test-key-not-a-secret"
    }
    for tool in ("logs", "metrics", "deploys"):
        assert f"  tool {tool}('checkout') ran" in incident
    assert "  output: roll back checkout v42" in incident
    assert _termination(incident) == "SUCCESS: the agent run produced its final output"
