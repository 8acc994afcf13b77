"""Every termination reason, per loop, through the real gateway, store, runner and toolbox."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from synthorg.domain import (
    ActionEvent,
    ConversationStatus,
    ErrorEvent,
    ExecutionResult,
    ObservationEvent,
    TerminationReason,
    TokenUsage,
)
from synthorg.engine.native import NativeLoopSettings
from synthorg.engine.native.scripts import (
    endless_script,
    idle_script,
    repeating_script,
    with_planning,
)
from synthorg.gateway.scripted import ScriptedModel, ScriptedSequence, ScriptedTurn
from synthorg.gateway.wire import ChatMessage

from .harness import Harness, Run, harness

pytestmark = [pytest.mark.bwrap]
LOOPS = ["react", "plan_execute", "hybrid"]


def on_turn(n: int, action: Any, script: ScriptedModel = endless_script) -> ScriptedModel:
    """``script`` that calls ``action()`` when the model is asked for its n-th turn."""

    def wrapped(
        messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> ScriptedTurn:
        if sum(1 for m in messages if m.role == "assistant") + 1 == n:
            action()
        return script(messages, tools)

    return with_planning(wrapped)


async def run_to_end(h: Harness, run: Run, **kwargs: Any) -> ExecutionResult:
    async with h.toolbox(run.context.conversation_id) as toolbox:
        return await h.execute(run, toolbox, **kwargs)


async def assert_consistent(h: Harness, run: Run, result: ExecutionResult) -> None:
    """Every action has one observation; turn deltas sum to the total, which is the ledger's."""
    events = [e.event for e in await h.events(run.context.conversation_id)]
    actions = [e.action_id for e in events if isinstance(e, ActionEvent)]
    observed = [e.action_id for e in events if isinstance(e, ObservationEvent)]
    assert sorted(actions) == sorted(observed)
    total = sum((t.usage for t in result.turns), TokenUsage())
    assert total == result.usage
    row = await h.gateway.usage(run.binding.execution_id)
    assert (total.tokens_in, total.tokens_out, total.cost_usd) == (
        row.tokens_in,
        row.tokens_out,
        row.cost_usd,
    )


@pytest.mark.parametrize("loop_type", LOOPS)
async def test_gateway_kill_at_the_cost_ceiling_is_budget_exhausted(
    tmp_path: Path, loop_type: str
) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(
            with_planning(endless_script), loop_type=loop_type, ceiling=Decimal("1.5")
        )
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.BUDGET_EXHAUSTED
        assert "cost ceiling" in (result.error or "")
        await assert_consistent(h, run, result)
        row = await h.gateway.usage(run.binding.execution_id)
        # Killed once a request took it over, or stopped short: the next request's least
        # cost exceeded what was left (402 request_exceeds_budget, the run never went over).
        killed = row.status == "killed" and row.cost_usd >= Decimal("1.5")
        refused = row.status == "active" and "left of its cost ceiling of $1.5" in (
            result.error or ""
        )
        assert killed or refused, (row, result.error)
        assert 2 <= len(result.turns) < 20
        events = [e.event for e in await h.events(run.context.conversation_id)]
        assert any(isinstance(e, ErrorEvent) and e.code == "budget_exhausted" for e in events)
        record = await h.store.get_conversation(run.context.conversation_id)
        assert record.status is ConversationStatus.FAILED


async def test_budget_checker_stops_before_the_ceiling(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(endless_script, budget=Decimal("1.0"), ceiling=Decimal(100))
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.BUDGET_EXHAUSTED
        row = await h.gateway.usage(run.binding.execution_id)
        assert row.status == "active"  # the sink stopped it, not the gateway
        await assert_consistent(h, run, result)


@pytest.mark.parametrize("loop_type", LOOPS)
@pytest.mark.parametrize("flag", ["cancel", "shutdown"])
async def test_cancel_and_shutdown_stop_at_the_next_event(
    tmp_path: Path, loop_type: str, flag: str
) -> None:
    async with harness(tmp_path) as h:
        holder: list[Run] = []
        run = await h.new_run(
            on_turn(4, lambda: getattr(holder[0], flag).set()), loop_type=loop_type
        )
        holder.append(run)
        result = await run_to_end(h, run)
        expected = {"cancel": TerminationReason.CANCELLED, "shutdown": TerminationReason.SHUTDOWN}
        assert result.termination_reason is expected[flag]
        assert len(result.turns) == 4
        await assert_consistent(h, run, result)
        record = await h.store.get_conversation(run.context.conversation_id)
        assert record.status is expected[flag].conversation_status()


async def test_pause_after_the_in_flight_call(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        holder: list[Run] = []
        run = await h.new_run(on_turn(2, lambda: holder[0].control.request_pause()))
        holder.append(run)
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.PAUSED
        assert len(result.turns) == 2
        await assert_consistent(h, run, result)


async def test_cancelling_the_task_leaves_the_conversation_cancelled(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(endless_script)
        cid = run.context.conversation_id
        async with h.toolbox(cid) as toolbox:
            task = asyncio.create_task(h.execute(run, toolbox))
            while sum(isinstance(e.event, ObservationEvent) for e in await h.events(cid)) < 3:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        record = await h.store.get_conversation(cid)
        assert record.status is ConversationStatus.CANCELLED


@pytest.mark.parametrize("loop_type", LOOPS)
async def test_max_turns(tmp_path: Path, loop_type: str) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(with_planning(endless_script), loop_type=loop_type, max_turns=5)
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.MAX_TURNS
        assert len(result.turns) == 5
        await assert_consistent(h, run, result)


@pytest.mark.parametrize("loop_type", LOOPS)
async def test_no_op_when_nothing_was_done(tmp_path: Path, loop_type: str) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(idle_script, loop_type=loop_type)
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.NO_OP, result.error
        record = await h.store.get_conversation(run.context.conversation_id)
        assert record.status is ConversationStatus.FAILED
        # Without artifacts expected, the same run is a plain success.
        run = await h.new_run(idle_script, loop_type=loop_type, artifacts_expected=False)
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.COMPLETED


@pytest.mark.parametrize(
    ("loop_type", "error"),
    [
        ("react", "stuck: repeated $ ls"),
        ("plan_execute", "gave up after 1 re-plans"),
        ("hybrid", "stuck: repeated $ ls"),
    ],
)
async def test_stuck(tmp_path: Path, loop_type: str, error: str) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(with_planning(repeating_script), loop_type=loop_type)
        settings = NativeLoopSettings(max_replans=1, max_revisions_when_stuck=1)
        result = await run_to_end(h, run, settings=settings)
        assert result.termination_reason is TerminationReason.ERROR
        assert error in (result.error or "")
        await assert_consistent(h, run, result)
        plans = [
            e.event
            for e in await h.events(run.context.conversation_id)
            if isinstance(e.event, ActionEvent) and e.event.tool_name == "write_plan"
        ]
        # react never plans; plan_execute re-plans once; hybrid revises once when stuck.
        assert len(plans) == {"react": 0, "plan_execute": 2, "hybrid": 2}[loop_type]


async def test_model_failure_is_error_with_the_gateway_message(tmp_path: Path) -> None:
    script = ScriptedSequence("short", [ScriptedTurn.call("terminal", command="true")])
    async with harness(tmp_path) as h:
        run = await h.new_run(script)
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.ERROR
        assert "model call failed" in (result.error or "")
        assert "ran out of turns" in (result.error or "")
        assert len(result.turns) == 1
        await assert_consistent(h, run, result)


async def test_a_crashing_provider_is_error_not_a_hang(tmp_path: Path) -> None:
    def broken(messages: Sequence[ChatMessage], tools: Any) -> ScriptedTurn:
        raise ValueError("model exploded")

    async with harness(tmp_path) as h:
        run = await h.new_run(broken)
        result = await run_to_end(h, run)
        assert result.termination_reason is TerminationReason.ERROR
        assert "the gateway answered 500" in (result.error or "")
