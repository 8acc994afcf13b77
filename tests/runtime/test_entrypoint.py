"""run_task.py end to end: the real SDK, the real gateway, the gateway's scripted provider.

Not sandboxed here (the sandbox has its own suite): the entrypoint runs directly with the
runtime venv's python and a scrubbed environment.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from synthorg.gateway.scripted import ScriptedTurn
from synthorg.runtime import OpenHandsRuntime

from .entrypoint_driver import EntrypointRun
from .gateway_harness import (
    INPUT_PER_TOKEN,
    MODEL,
    NOTE_TOOL,
    OUTPUT_PER_TOKEN,
    GatewayThread,
    RecordingScript,
    calls,
)

pytestmark = [pytest.mark.openhands, pytest.mark.slow]

CONVERSATION = "conv-e2e"


def make_spec(
    tmp_path: Path, gateway: GatewayThread, token: str, **overrides: Any
) -> dict[str, Any]:
    workspace = tmp_path / "worktree"
    workspace.mkdir(exist_ok=True)
    spec: dict[str, Any] = {
        "task_prompt": "Create notes.txt and show it.",
        "model": MODEL,
        "gateway_base_url": gateway.base_url,
        "gateway_token": token,
        "mcp_base_url": None,
        "workspace_path": str(workspace),
        "persistence_dir": str(tmp_path / "state"),
        "conversation_id": CONVERSATION,
        "max_turns": 10,
        "project_id": "proj-1",
        "input_cost_per_token": INPUT_PER_TOKEN,
        "output_cost_per_token": OUTPUT_PER_TOKEN,
        "terminal_type": "subprocess",
    }
    spec.update(overrides)
    return spec


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test() -> Iterator[None]:
    yield
    EntrypointRun.kill_all()


def start(
    runtime: OpenHandsRuntime, tmp_path: Path, gateway: GatewayThread, **overrides: Any
) -> tuple[EntrypointRun, str]:
    """Open an execution at the gateway, then start the entrypoint with its bearer."""
    execution_id, token = gateway.open_run(CONVERSATION)
    spec = make_spec(tmp_path, gateway, token, **overrides)
    stderr = tmp_path / f"stderr-{execution_id}"
    return EntrypointRun(runtime, spec, stderr), execution_id


def test_task_edits_a_file_runs_a_command_and_finishes(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"
    script = RecordingScript(
        [
            ScriptedTurn.call(
                "file_editor", command="create", path=str(workspace / "notes.txt"), file_text="hi\n"
            ),
            ScriptedTurn.call("terminal", command="cat notes.txt && echo ran-$((6*7))"),
            ScriptedTurn.call("finish", message="notes written"),
        ]
    )
    with GatewayThread(tmp_path, script) as gateway:
        run, execution_id = start(openhands_runtime, tmp_path, gateway)
        finished = run.wait_for("finished")
        assert run.finish() == 0
        usage = gateway.usage(execution_id)

    assert (workspace / "notes.txt").read_text() == "hi\n"
    assert finished["summary"] == "notes written"
    actions = run.of_kind("action")
    assert [a["tool_name"] for a in actions] == ["file_editor", "terminal", "finish"]
    assert actions[1]["arguments"] == {"command": "cat notes.txt && echo ran-$((6*7))"}
    observations = {o["action_id"]: o for o in run.of_kind("observation")}
    assert set(observations) == {a["id"] for a in actions}
    assert observations[actions[1]["id"]]["content"].startswith("hi\nran-42\n")  # no escapes
    assert observations[actions[1]["id"]]["tool_call_id"] == actions[1]["tool_call_id"]
    # Per-turn token deltas sum to what the gateway metered; the running cost agrees with it.
    assert usage.requests == 3
    assert sum(a["prompt_tokens"] for a in actions) == usage.tokens_in
    assert sum(a["completion_tokens"] for a in actions) == usage.tokens_out
    assert all("prompt_tokens" not in o for o in run.of_kind("observation"))
    costs = [e["accumulated_cost"] for e in run.events if "accumulated_cost" in e]
    assert costs == sorted(costs)
    assert finished["accumulated_cost"] == pytest.approx(float(usage.cost_usd))
    assert "Create notes.txt" in script.history_text(0)


def test_pause_then_steering_message_continues(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    script = RecordingScript(
        [
            ScriptedTurn.call("terminal", command="sleep 3; echo slept"),
            ScriptedTurn.call("finish", message="steered"),
        ]
    )
    with GatewayThread(tmp_path, script) as gateway:
        run, _ = start(openhands_runtime, tmp_path, gateway)
        run.wait_for("action", tool_name="terminal")
        run.send({"type": "pause"})  # takes effect at the step boundary after the command
        run.wait_for("status", sdk_type="PauseEvent", summary="pause_requested")
        run.wait_for("status", summary="paused")
        assert len(script.requests) == 1  # paused: the model is not asked again
        run.send({"type": "message", "text": "STEER: wrap up now"})
        finished = run.wait_for("finished")
        assert run.finish() == 0

    assert finished["summary"] == "steered"
    assert "STEER: wrap up now" in script.history_text(1)
    steering = [m for m in run.of_kind("message") if m["source"] == "user"]
    assert steering[-1]["content"] == "STEER: wrap up now"


def two_risky_calls() -> ScriptedTurn:
    return calls(
        ("terminal", {"command": "touch approved.txt", "security_risk": "HIGH"}),
        ("terminal", {"command": "touch rejected.txt", "security_risk": "HIGH"}),
    )


RISKY = {"confirmation_policy": "risky", "security_analyzer": True}


def test_confirmation_is_bound_to_action_ids(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"
    script = RecordingScript([two_risky_calls(), ScriptedTurn.call("finish", message="done")])
    with GatewayThread(tmp_path, script) as gateway:
        run, _ = start(openhands_runtime, tmp_path, gateway, **RISKY)
        request = run.wait_for("confirmation_request")
        pending = {p["action_id"]: p for p in request["pending"]}
        actions = run.of_kind("action")
        assert set(pending) == {a["id"] for a in actions}
        assert {p["risk"] for p in pending.values()} == {"HIGH"}
        first, second = (a["id"] for a in actions)
        assert not (workspace / "approved.txt").exists()

        run.send({"type": "confirm", "accept": [first], "reject": ["not-a-pending-id"]})
        refused = run.wait_for("decision_refused")
        assert sorted(refused["pending"]) == sorted(pending)
        run.send({"type": "confirm", "accept": [first], "reject": [second], "reason": "no"})
        run.wait_for("finished")
        assert run.finish() == 0

    assert (workspace / "approved.txt").exists()
    assert not (workspace / "rejected.txt").exists()
    by_action = {o["action_id"]: o for o in run.of_kind("observation") if "action_id" in o}
    assert by_action[second]["rejected"] is True
    assert by_action[second]["content"] == "no"
    assert "rejected" not in by_action[first]
    # Both actions came from one model response: its tokens are counted once.
    assert actions[0]["prompt_tokens"] > 0
    assert actions[1]["prompt_tokens"] == 0


def test_resume_after_kill_continues_the_persisted_conversation(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"
    script = RecordingScript([two_risky_calls(), ScriptedTurn.call("finish", message="resumed")])
    with GatewayThread(tmp_path, script) as gateway:
        first, _ = start(openhands_runtime, tmp_path, gateway, **RISKY)
        request = first.wait_for("confirmation_request")
        first.kill()  # the host process dies while the run waits for a decision
        started = first.of_kind("status")[0]

        second, execution_id = start(openhands_runtime, tmp_path, gateway, **RISKY)
        resumed = second.wait_for("status", summary="resumed")
        assert resumed["conversation_id"] == started["conversation_id"]
        assert resumed["persisted_events"] > 0
        # The persisted cost carries over; the host subtracts this baseline.
        assert resumed["accumulated_cost"] == pytest.approx(request["accumulated_cost"])
        # The calls that waited for a decision are answered, never executed: the old wait
        # ends, the model hears what happened to each call, paired with it, and goes on.
        second.wait_for("finished", summary="resumed")
        assert second.finish() == 0
        assert not second.of_kind("confirmation_request")
        usage = gateway.usage(execution_id)

    # The model saw the first run's calls and their answers: the same conversation went on.
    history = script.history_text(1)
    assert "touch approved.txt" in history and "touch rejected.txt" in history
    assert "its effect is unknown" in history
    assert not (workspace / "approved.txt").exists() and not (workspace / "rejected.txt").exists()
    assert usage.requests == 1  # the second execution made only the finishing request
    user_messages = [m for m in second.of_kind("message") if m["source"] == "user"]
    assert user_messages == []  # the task prompt is not sent twice


def test_detaches_at_a_wait_point_when_stdin_closes(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    script = RecordingScript([two_risky_calls()])
    with GatewayThread(tmp_path, script) as gateway:
        run, _ = start(openhands_runtime, tmp_path, gateway, **RISKY)
        run.wait_for("confirmation_request")
        run.send({"type": "bogus"})
        run.wait_for("control_refused")
        run.close_stdin()
        run.wait_for("status", summary="detached")
        assert run.finish() == 0


def test_model_failure_is_an_error_event_and_exit_1(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    with GatewayThread(tmp_path, RecordingScript([])) as gateway:  # exhausted at once
        run, _ = start(openhands_runtime, tmp_path, gateway)
        error = run.wait_for("error")
        assert run.finish() == 1
    assert error["code"]
    assert "ran out of turns" in json.dumps(run.of_kind("error"))


def test_invalid_spec_is_refused(openhands_runtime: OpenHandsRuntime, tmp_path: Path) -> None:
    with GatewayThread(tmp_path, RecordingScript([])) as gateway:
        run, _ = start(openhands_runtime, tmp_path, gateway, confirmation_policy="sometimes")
        error = run.wait_for("error", code="invalid_spec")
        assert run.finish() == 2
    assert "confirmation_policy" in error["content"]


def test_mcp_tools_over_streamable_http_with_the_run_bearer(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    script = RecordingScript(
        [
            ScriptedTurn.call(NOTE_TOOL, note="hello from the sandbox"),
            ScriptedTurn.call("finish", message="noted"),
        ]
    )
    with GatewayThread(tmp_path, script, mcp=True) as gateway:
        run, _ = start(openhands_runtime, tmp_path, gateway, mcp_base_url=gateway.mcp_url)
        run.wait_for("finished", summary="noted")
        assert run.finish() == 0

    assert gateway.mcp_calls == [("proj-1", "hello from the sandbox")]
    action = run.of_kind("action")[0]
    assert action["tool_name"] == NOTE_TOOL
    observation = next(o for o in run.of_kind("observation") if o["action_id"] == action["id"])
    assert "noted for proj-1: hello from the sandbox" in observation["content"]
    assert NOTE_TOOL in script.tool_names[0]


def test_interrupt_skips_pending_calls_and_pauses(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"
    script = RecordingScript(
        [
            calls(
                ("terminal", {"command": "sleep 5; echo first"}),
                ("terminal", {"command": "touch after.txt"}),
            ),
            ScriptedTurn.call("finish", message="after interrupt"),
        ]
    )
    with GatewayThread(tmp_path, script) as gateway:
        run, _ = start(openhands_runtime, tmp_path, gateway)
        run.wait_for("action", tool_name="terminal")
        second = run.wait_for("action", tool_name="terminal")
        run.send({"type": "interrupt"})  # while the first command still sleeps
        run.send({"type": "resume"})  # before the pause took hold: resumes right after it
        run.wait_for("status", summary="paused")
        run.wait_for("finished", summary="after interrupt")
        assert run.finish() == 0

    skipped = [o for o in run.of_kind("observation") if o["tool_call_id"] == second["tool_call_id"]]
    assert [o["is_error"] for o in skipped] == [True]
    assert "interrupt" in skipped[0]["content"]
    assert not (workspace / "after.txt").exists()
