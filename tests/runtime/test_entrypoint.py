"""run_task.py end to end with the real SDK against a scripted OpenAI-compatible model.

Not sandboxed here (the sandbox has its own suite): the entrypoint runs directly with the
runtime venv's python and a scrubbed environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from synthorg.runtime import OpenHandsRuntime

from .entrypoint_driver import EntrypointRun
from .scripted_openai import (
    COMPLETION_TOKENS,
    PROMPT_TOKENS,
    Reply,
    ScriptedServer,
    call,
    finish,
)

pytestmark = [pytest.mark.openhands, pytest.mark.slow]

PRICE_IN, PRICE_OUT = 1e-6, 3e-6
TURN_COST = PROMPT_TOKENS * PRICE_IN + COMPLETION_TOKENS * PRICE_OUT


def make_spec(tmp_path: Path, server: ScriptedServer, **overrides: Any) -> dict[str, Any]:
    workspace = tmp_path / "worktree"
    workspace.mkdir(exist_ok=True)
    spec: dict[str, Any] = {
        "task_prompt": "Create notes.txt and show it.",
        "model": "scripted-model",
        "gateway_base_url": server.base_url,
        "gateway_token": server.token,
        "mcp_base_url": None,
        "workspace_path": str(workspace),
        "persistence_dir": str(tmp_path / "state"),
        "conversation_id": "conv-e2e",
        "max_turns": 10,
        "project_id": "proj-1",
        "input_cost_per_token": PRICE_IN,
        "output_cost_per_token": PRICE_OUT,
        "terminal_type": "subprocess",
    }
    spec.update(overrides)
    return spec


def start(runtime: OpenHandsRuntime, tmp_path: Path, spec: dict[str, Any]) -> EntrypointRun:
    return EntrypointRun(runtime, spec, tmp_path / f"stderr-{len(list(tmp_path.glob('stderr-*')))}")


def user_texts(request: dict[str, Any]) -> list[str]:
    texts = []
    for message in request["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        parts = content if isinstance(content, list) else [{"text": content}]
        texts.extend(str(p.get("text", "")) for p in parts)
    return texts


def test_task_edits_a_file_runs_a_command_and_finishes(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"
    script = [
        call("file_editor", command="create", path=str(workspace / "notes.txt"), file_text="hi\n"),
        call("terminal", command="cat notes.txt && echo ran-$((6*7))"),
        finish("notes written"),
    ]
    with ScriptedServer(script) as server:
        run = start(openhands_runtime, tmp_path, make_spec(tmp_path, server))
        finished = run.wait_for("finished")
        assert run.finish() == 0

    assert (workspace / "notes.txt").read_text() == "hi\n"
    assert finished["summary"] == "notes written"
    actions = run.of_kind("action")
    assert [a["tool_name"] for a in actions] == ["file_editor", "terminal", "finish"]
    assert actions[1]["arguments"] == {"command": "cat notes.txt && echo ran-$((6*7))"}
    observations = {o["action_id"]: o for o in run.of_kind("observation")}
    assert set(observations) == {a["id"] for a in actions}
    assert "ran-42" in observations[actions[1]["id"]]["content"]
    assert observations[actions[1]["id"]]["tool_call_id"] == actions[1]["tool_call_id"]
    # Token deltas are on turns only and sum to the metered totals.
    assert sum(a["prompt_tokens"] for a in actions) == 3 * PROMPT_TOKENS
    assert sum(a["completion_tokens"] for a in actions) == 3 * COMPLETION_TOKENS
    assert all("prompt_tokens" not in o for o in run.of_kind("observation"))
    costs = [e["accumulated_cost"] for e in run.events if "accumulated_cost" in e]
    assert costs == sorted(costs)
    assert finished["accumulated_cost"] == pytest.approx(3 * TURN_COST)
    # The bearer reached the model; the entrypoint sent OpenAI-style tool calls.
    assert "create notes.txt" in user_texts(server.requests[0])[0].lower()
    assert {t["function"]["name"] for t in server.requests[0]["tools"]} >= {
        "terminal",
        "file_editor",
        "finish",
    }


def test_pause_then_steering_message_continues(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    script = [call("terminal", command="sleep 3; echo slept")]
    with ScriptedServer(script) as server:
        run = start(openhands_runtime, tmp_path, make_spec(tmp_path, server))
        run.wait_for("action", tool_name="terminal")
        run.send({"type": "pause"})  # takes effect at the step boundary after the command
        run.wait_for("status", sdk_type="PauseEvent")
        paused = run.wait_for("status", summary="paused")
        assert len(server.requests) == 1
        server.extend([finish("steered")])
        run.send({"type": "message", "text": "STEER: wrap up now"})
        finished = run.wait_for("finished")
        assert run.finish() == 0

    assert finished["summary"] == "steered"
    assert paused["accumulated_cost"] == pytest.approx(TURN_COST)
    assert any("STEER: wrap up now" in t for t in user_texts(server.requests[1]))
    steering = [m for m in run.of_kind("message") if m["source"] == "user"]
    assert [m["content"] for m in steering][-1] == "STEER: wrap up now"


def risky_spec(tmp_path: Path, server: ScriptedServer) -> dict[str, Any]:
    return make_spec(tmp_path, server, confirmation_policy="risky", security_analyzer=True)


def two_risky_calls(workspace: Path) -> Reply:
    return Reply(
        tool_calls=[
            ("terminal", {"command": "touch approved.txt", "security_risk": "HIGH"}),
            ("terminal", {"command": "touch rejected.txt", "security_risk": "HIGH"}),
        ]
    )


def test_confirmation_is_bound_to_action_ids(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"
    with ScriptedServer([two_risky_calls(workspace), finish("done")]) as server:
        run = start(openhands_runtime, tmp_path, risky_spec(tmp_path, server))
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
    assert [a["prompt_tokens"] for a in actions] == [PROMPT_TOKENS, 0]


def test_resume_after_kill_continues_the_persisted_conversation(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"
    with ScriptedServer([two_risky_calls(workspace)]) as server:
        first = start(openhands_runtime, tmp_path, risky_spec(tmp_path, server))
        request = first.wait_for("confirmation_request")
        first.kill()  # the host process dies while the run waits for a decision
        started = first.of_kind("status")[0]

    with ScriptedServer([finish("resumed fine")]) as server:
        second = start(openhands_runtime, tmp_path, risky_spec(tmp_path, server))
        resumed = second.wait_for("status", summary="resumed")
        assert resumed["conversation_id"] == started["conversation_id"]
        assert resumed["persisted_events"] > 0
        again = second.wait_for("confirmation_request")
        assert again["pending"] == request["pending"]
        ids = [p["action_id"] for p in again["pending"]]
        second.send({"type": "confirm", "accept": ids, "reject": []})
        second.wait_for("finished", summary="resumed fine")
        assert second.finish() == 0
        # The model saw the first run's tool calls and their results: same conversation.
        history = json.dumps(server.requests[0]["messages"])

    assert "touch approved.txt" in history and "touch rejected.txt" in history
    assert (workspace / "approved.txt").exists() and (workspace / "rejected.txt").exists()
    assert not second.of_kind("message") or all(
        m["content"] != "Create notes.txt and show it." for m in second.of_kind("message")
    )


def test_detaches_at_a_wait_point_when_stdin_closes(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    with ScriptedServer([two_risky_calls(tmp_path / "worktree")]) as server:
        run = start(openhands_runtime, tmp_path, risky_spec(tmp_path, server))
        run.wait_for("confirmation_request")
        run.send({"type": "bogus"})
        run.wait_for("control_refused")
        run.close_stdin()
        run.wait_for("status", summary="detached")
        assert run.finish() == 0


def test_model_failure_is_an_error_event_and_exit_1(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    with ScriptedServer([]) as server:  # exhausted script: the model answers HTTP 500
        run = start(openhands_runtime, tmp_path, make_spec(tmp_path, server))
        error = run.wait_for("error")
        assert run.finish() == 1
    assert error["code"]
    assert "script exhausted" in json.dumps(run.of_kind("error"))


def test_invalid_spec_is_refused(openhands_runtime: OpenHandsRuntime, tmp_path: Path) -> None:
    with ScriptedServer([]) as server:
        spec = make_spec(tmp_path, server, confirmation_policy="sometimes")
        run = start(openhands_runtime, tmp_path, spec)
        error = run.wait_for("error", code="invalid_spec")
        assert run.finish() == 2
    assert "confirmation_policy" in error["content"]
