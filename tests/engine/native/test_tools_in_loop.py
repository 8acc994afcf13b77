"""Invalid tool calls, confirmation bound to action ids, and steering, in a real react run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from synthorg.domain import (
    ActionEvent,
    ConfirmationDecisionEvent,
    ConfirmationPolicy,
    ConfirmationRequestEvent,
    MessageEvent,
    ObservationEvent,
    RiskLevel,
    TerminationReason,
)
from synthorg.engine import Decision
from synthorg.engine.native.scripts import INVALID_CALLS, invalid_args_script
from synthorg.gateway.scripted import ScriptedSequence, ScriptedTurn
from synthorg.gateway.wire import ChatMessage

from .harness import harness

pytestmark = [pytest.mark.bwrap]


async def test_invalid_tool_arguments_come_back_as_error_observations(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(invalid_args_script)
        async with h.toolbox() as toolbox:
            result = await h.execute(run, toolbox)
        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        assert (h.repo / "ok.txt").read_text() == "ok\n"
        events = [e.event for e in await h.events(run.context.conversation_id)]
        observations = {e.action_id: e for e in events if isinstance(e, ObservationEvent)}
        actions = [e for e in events if isinstance(e, ActionEvent)]
        errors = [observations[a.action_id] for a in actions[: len(INVALID_CALLS)]]
        assert all(o.is_error for o in errors)
        expected = [
            "not valid JSON",
            "must be a JSON object",
            "command: Field required",
            "verbose: Extra inputs are not permitted",
            "command: Input should be a valid string",
            "create needs file_text",
            "command: Input should be 'view', 'create'",
            "unknown tool 'rm_everything'",
        ]
        for observation, text in zip(errors, expected, strict=True):
            assert text in observation.content, observation.content
        assert not observations[actions[len(INVALID_CALLS)].action_id].is_error
        assert not (h.repo / "x.txt").exists()


def _risky() -> ScriptedSequence:
    return ScriptedSequence(
        "risky",
        [
            ScriptedTurn(
                tool_calls=(
                    ScriptedTurn.call("terminal", command="rm -rf build").tool_calls[0],
                    ScriptedTurn.call(
                        "file_editor", command="create", path="notes.txt", file_text="n\n"
                    ).tool_calls[0],
                )
            ),
            ScriptedTurn.call("finish", message="done"),
        ],
    )


@pytest.mark.parametrize("accept", [True, False])
async def test_confirmation_is_bound_to_action_ids(tmp_path: Path, accept: bool) -> None:
    async with harness(tmp_path) as h:
        (h.repo / "build").mkdir()
        (h.repo / "build" / "out.o").write_text("x")
        run = await h.new_run(_risky(), policy=ConfirmationPolicy.RISKY)

        async def approver() -> Decision:
            while not run.control.pending_actions:
                await asyncio.sleep(0.005)
            pending = run.control.pending_actions
            decision = Decision(
                accepted=pending if accept else frozenset(),
                rejected=frozenset() if accept else pending,
                approver="alice",
                reason="" if accept else "keep the build dir",
            )
            run.control.decide(decision)
            return decision

        async with h.toolbox() as toolbox:
            decided, result = await asyncio.gather(approver(), h.execute(run, toolbox))
        assert result.termination_reason is TerminationReason.COMPLETED
        events = [e.event for e in await h.events(run.context.conversation_id)]
        request = next(e for e in events if isinstance(e, ConfirmationRequestEvent))
        # Only the HIGH-risk command waits; the MEDIUM edit runs under the RISKY policy.
        assert [(p.tool_name, p.risk) for p in request.pending] == [("terminal", RiskLevel.HIGH)]
        assert {p.action_id for p in request.pending} == decided.accepted | decided.rejected
        decision = next(e for e in events if isinstance(e, ConfirmationDecisionEvent))
        assert decision.approver == "alice"
        observations = {e.action_id: e for e in events if isinstance(e, ObservationEvent)}
        rm = observations[request.pending[0].action_id]
        assert (h.repo / "notes.txt").exists()
        if accept:
            assert not rm.is_error and not (h.repo / "build").exists()
        else:
            assert rm.is_error and "rejected by alice: keep the build dir" in rm.content
            assert (h.repo / "build" / "out.o").exists()


async def test_steering_reaches_the_model_before_its_next_call(tmp_path: Path) -> None:
    seen: list[str] = []

    def script(messages: Sequence[ChatMessage], tools: Any) -> ScriptedTurn:
        seen.append(messages[-1].text())
        if len(seen) == 1:
            return ScriptedTurn.call("terminal", command="echo hi > hi.txt")
        return ScriptedTurn.call("finish", message=f"heard: {messages[-1].text()}")

    async with harness(tmp_path) as h:
        run = await h.new_run(script)
        run.context.control.steer("also say hello")
        async with h.toolbox() as toolbox:
            result = await h.execute(run, toolbox)
        assert seen[0] == "also say hello"
        assert seen[1] == "[exit code: 0]"  # the observation of the command, after steering
        assert result.final_message == "heard: [exit code: 0]"
        # Whoever steers logs the message (the service, before acknowledging); the loop reads
        # it and never logs it a second time.
        events = [e.event for e in await h.events(run.context.conversation_id)]
        assert not any(
            isinstance(e, MessageEvent) and e.role == "user" and e.text == "also say hello"
            for e in events
        )
