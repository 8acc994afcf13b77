"""Each loop fixes a real failing test through the real gateway, store, runner and bwrap toolbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.domain import (
    ActionEvent,
    CheckpointEvent,
    ConversationStatus,
    FinishedEvent,
    ObservationEvent,
    TerminationReason,
    TokenUsage,
)
from synthorg.engine.native.scripts import demo_fix_script
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.worktrees import WorktreeManager

from .harness import git, harness

pytestmark = [pytest.mark.bwrap]


@pytest.mark.parametrize("loop_type", ["react", "plan_execute", "hybrid"])
async def test_multi_step_fix_on_a_real_repo(tmp_path: Path, loop_type: str) -> None:
    async with harness(tmp_path) as h:
        run = await h.new_run(demo_fix_script, loop_type=loop_type)
        cid = run.context.conversation_id
        checkpoints = CheckpointStore()
        # Checkpoints need a worktree SynthOrg made (host git never runs in a directory the
        # agent edits in place): the run works in one of the harness's repository.
        ws = await WorktreeManager(tmp_path / "home").create(h.repo, cid)
        h.repo = ws.path

        async def checkpoint(action_id: str) -> CheckpointEvent:
            cp = await checkpoints.create(ws, cid)
            return CheckpointEvent(index=cp.index, ref=cp.ref, action_id=action_id)

        async with h.toolbox(cid) as toolbox:
            result = await h.execute(run, toolbox, checkpoint=checkpoint)

        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        assert result.loop_type == loop_type
        # The fix is real: the tests pass on the host now, and the diff is the one-line fix.
        assert "return a + b" in (h.repo / "calc.py").read_text()
        out = git(h.repo, "diff", "--stat")
        assert "calc.py | 2 +-" in out
        events = [e.event for e in await h.events(cid)]
        actions = [e for e in events if isinstance(e, ActionEvent)]
        tools = [a.tool_name for a in actions]
        assert tools.count("terminal") == 2 and "file_editor" in tools
        observations = {e.action_id: e for e in events if isinstance(e, ObservationEvent)}
        assert set(observations) == {a.action_id for a in actions}
        test_runs = [observations[a.action_id] for a in actions if a.tool_name == "terminal"]
        assert test_runs[0].exit_code != 0 and test_runs[-1].exit_code == 0
        # A checkpoint precedes the edit and every terminal command (they may mutate).
        marked = {e.action_id for e in events if isinstance(e, CheckpointEvent)}
        assert {
            a.action_id
            for a in actions
            if a.tool_name in ("terminal", "file_editor") and a.arguments.get("command") != "view"
        } <= marked
        if loop_type == "react":
            assert isinstance(events[-2], FinishedEvent) or any(
                isinstance(e, FinishedEvent) for e in events
            )
        if loop_type != "react":
            assert tools[0] == "write_plan"
        # Cost: per-turn deltas sum exactly to the run total, which is the gateway ledger's.
        row = await h.gateway.usage(run.binding.execution_id)
        total = sum((t.usage for t in result.turns), TokenUsage())
        assert total == result.usage
        assert (total.tokens_in, total.tokens_out, total.cost_usd) == (
            row.tokens_in,
            row.tokens_out,
            row.cost_usd,
        )
        assert row.cost_usd > 0 and len(result.turns) == row.requests
        record = await h.store.get_conversation(cid)
        assert record.status is ConversationStatus.FINISHED
