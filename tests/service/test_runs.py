"""The run service end to end: real worktree, gateway, bwrap sandbox, loops, commit gate."""

from __future__ import annotations

import asyncio
import os
import subprocess
from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from synthorg.domain import (
    ConfirmationPolicy,
    ConversationStatus,
    TerminationReason,
)
from synthorg.engine import Decision
from synthorg.engine.openhands import OpenHandsUnavailableError
from synthorg.errors import ConflictError
from synthorg.service.creation import NotOffered
from synthorg.service.options import RunOptions
from synthorg.store.reconcile import claimant

from .conftest import Booter, make_task

pytestmark = pytest.mark.bwrap


def _sandboxes_alive() -> list[psutil.Process]:
    me = psutil.Process()
    return [p for p in me.children(recursive=True) if "bwrap" in p.name()]


async def _wait_for_kind(components, conversation_id: str, kind: str, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    async def find():  # type: ignore[no-untyped-def]
        async for stored in components.store.tail(conversation_id):
            if stored.event.kind == kind:
                return stored

    return await asyncio.wait_for(find(), timeout)


@pytest.mark.parametrize("loop", ["react", "plan_execute", "hybrid"])
async def test_demo_fix_lands_a_commit(booted: Booter, demo_repo: Path, loop: str) -> None:
    async with booted("demo_fix_script") as components:
        record = await components.service.create(make_task(demo_repo), RunOptions(loop=loop))
        result = await components.service.run(record.id)
        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        assert result.commit_sha is not None
        assert result.branch == f"synthorg/{record.id}"
        final = await components.store.get_conversation(record.id)
        assert final.status is ConversationStatus.FINISHED
        assert final.commit_sha == result.commit_sha
        assert sum(t.cost_usd for t in result.turns) == result.usage.cost_usd > 0
    worktree = Path(final.workspace.path)  # type: ignore[union-attr]
    tests = subprocess.run(["python3", "-m", "unittest"], cwd=worktree, capture_output=True)
    assert tests.returncode == 0, tests.stderr
    # The user's checkout is untouched: main still has the bug.
    assert "a - b" in (demo_repo / "calc.py").read_text()
    branch_file = subprocess.run(
        ["git", "show", f"{result.branch}:calc.py"], cwd=demo_repo, capture_output=True, text=True
    ).stdout
    assert "a + b" in branch_file
    assert not _sandboxes_alive()


async def test_cancel_stops_the_run_and_the_sandbox(booted: Booter, demo_repo: Path) -> None:
    async with booted("endless_script", latency_ms=50) as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(max_turns=500))
        await service.start(record.id)
        await _wait_for_kind(components, record.id, "observation")
        with pytest.raises(ConflictError, match="already has an active run"):
            await service.start(record.id)
        with pytest.raises(ConflictError, match="running"):
            await service.delete(record.id)
        await service.cancel(record.id, by="tester")
        result = await service.wait(record.id)
        assert result is not None
        assert result.termination_reason is TerminationReason.CANCELLED
        final = await components.store.get_conversation(record.id)
        assert final.status is ConversationStatus.CANCELLED
        assert not _sandboxes_alive()
        assert not service.is_active(record.id)
        with pytest.raises(ConflictError, match="no active run"):
            await service.cancel(record.id, by="tester")


async def test_interrupt_leaves_it_resumable_and_resume_continues(
    booted: Booter, demo_repo: Path
) -> None:
    async with booted(f"{__name__.rsplit('.', 1)[0]}.scripts:progress_five") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        await service.start(record.id)
        await _wait_for_kind(components, record.id, "observation")
        await service.interrupt(record.id, by="tester")
        first = await service.wait(record.id)
        assert first is not None
        assert first.termination_reason is TerminationReason.PAUSED
        paused = await components.store.get_conversation(record.id)
        assert paused.status is ConversationStatus.PAUSED
        result = await service.run(record.id, message="please continue")
        assert result.resumed
        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        worktree = Path(paused.workspace.path)  # type: ignore[union-attr]
    lines = (worktree / "progress.txt").read_text().split()
    assert lines == ["1", "2", "3", "4", "5"]


async def test_pause_after_in_flight_call(booted: Booter, demo_repo: Path) -> None:
    async with booted("endless_script", latency_ms=100) as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(max_turns=500))
        await service.start(record.id)
        await _wait_for_kind(components, record.id, "action")
        await service.pause(record.id, by="tester")
        result = await service.wait(record.id)
        assert result is not None
        assert result.termination_reason is TerminationReason.PAUSED
        kinds = [e.event.kind for e in await components.store.history(record.id, limit=1000)]
        assert "pause" in kinds


async def test_confirmation_bound_to_action_ids(booted: Booter, demo_repo: Path) -> None:
    async with booted("demo_fix_script") as components:
        service = components.service
        record = await service.create(
            make_task(demo_repo), RunOptions(confirmation_policy=ConfirmationPolicy.ALWAYS)
        )
        await service.start(record.id)
        decided = 0
        statuses: list[ConversationStatus] = []
        async for stored in components.store.tail(record.id):
            event = stored.event
            if event.kind == "confirmation_request":
                ids = frozenset(p.action_id for p in event.pending)
                with pytest.raises(ConflictError, match="not pending"):
                    await service.decide(
                        record.id,
                        Decision(
                            accepted=frozenset({"act-stale"}), rejected=frozenset(), approver="eve"
                        ),
                    )
                await service.decide(
                    record.id, Decision(accepted=ids, rejected=frozenset(), approver="alice")
                )
                decided += 1
            if event.kind == "confirmation_decision":
                assert event.approver == "alice"
            if event.kind == "status_change" and event.termination_reason is not None:
                break
            if event.kind == "status_change":
                statuses.append(event.new)
        result = await service.wait(record.id)
        assert result is not None
        assert result.termination_reason is TerminationReason.COMPLETED
        assert decided >= 3
        assert statuses.count(ConversationStatus.WAITING_CONFIRMATION) == decided


async def test_budget_ceiling_kills_the_run(booted: Booter, demo_repo: Path) -> None:
    async with booted("endless_script") as components:
        service = components.service
        record = await service.create(
            make_task(demo_repo), RunOptions(max_turns=500, budget_usd=Decimal("0.003"))
        )
        result = await service.run(record.id)
        assert result.termination_reason is TerminationReason.BUDGET_EXHAUSTED
        row = await components.gateway.usage(result.execution_id)
        assert row.cost_usd <= Decimal("0.003") + Decimal("0.002")


async def test_shutdown_stops_runs_resumably(booted: Booter, demo_repo: Path) -> None:
    async with booted("endless_script", latency_ms=50) as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(max_turns=500))
        await service.start(record.id)
        await _wait_for_kind(components, record.id, "observation")
        await service.shutdown()
        result = await service.wait(record.id)
        assert result is not None
        assert result.termination_reason is TerminationReason.SHUTDOWN
        final = await components.store.get_conversation(record.id)
        assert final.status is ConversationStatus.PAUSED  # shut down: resumable
        with pytest.raises(ConflictError, match="shutting down"):
            await service.start(record.id)


async def test_delete_removes_the_worktree_keeps_the_branch(
    booted: Booter, demo_repo: Path
) -> None:
    async with booted("demo_fix_script") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        result = await service.run(record.id)
        worktree = Path(record.workspace.path)  # type: ignore[union-attr]
        assert worktree.is_dir()
        await service.delete(record.id)
        assert not worktree.exists()
        branches = subprocess.run(
            ["git", "branch", "--list", result.branch or ""],
            cwd=demo_repo,
            capture_output=True,
            text=True,
        ).stdout
        assert result.branch in branches


async def test_delete_is_refused_while_another_process_claims_the_conversation(
    booted: Booter, demo_repo: Path
) -> None:
    """A process that has claimed a conversation (to start or roll it back) but not yet
    marked it running must not see its worktree and record deleted under it."""
    async with booted("demo_fix_script") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        other = claimant().model_copy(update={"pid": os.getppid()})  # alive, not this process
        await components.store.claim_conversation(record.id, other, lease_s=60)
        with pytest.raises(ConflictError, match="another process"):
            await service.delete(record.id)
        assert Path(record.workspace.path).is_dir()  # type: ignore[union-attr]
        await components.store.release_conversation(record.id, other.owner_id)
        await service.delete(record.id)
        assert not Path(record.workspace.path).exists()  # type: ignore[union-attr]


async def test_bad_requests_fail_clearly(booted: Booter, demo_repo: Path, tmp_path: Path) -> None:
    async with booted("demo_fix_script") as components:
        service = components.service
        with pytest.raises(NotOffered, match="not a directory"):
            await service.create(make_task(tmp_path / "missing"), RunOptions())
        with pytest.raises(NotOffered, match="no configured provider serves model"):
            await service.create(make_task(demo_repo), RunOptions(model="gpt-nope"))
        with pytest.raises(NotOffered, match="synthorg runtime build openhands") as refused:
            await service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        assert isinstance(refused.value.__cause__, OpenHandsUnavailableError)
        assert await components.store.count_conversations() == 0  # nothing left behind


async def test_local_backend_says_so_in_the_run_log(booted: Booter, demo_repo: Path) -> None:
    async with booted(
        "demo_fix_script", sandbox={"backend": "local", "allow_local": True}
    ) as components:
        record = await components.service.create(make_task(demo_repo), RunOptions())
        result = await components.service.run(record.id)
        assert result.termination_reason is TerminationReason.COMPLETED
        events = await components.store.history(record.id, limit=5)
        warnings = [
            e.event.text for e in events if e.event.kind == "message" and e.event.role == "system"
        ]
        assert warnings and "NO ISOLATION" in warnings[0]


async def test_local_backend_needs_an_explicit_opt_in(booted: Booter) -> None:
    from synthorg.sandbox import SandboxOptInError

    with pytest.raises(SandboxOptInError):
        async with booted("demo_fix_script", sandbox={"backend": "local"}):
            pass
