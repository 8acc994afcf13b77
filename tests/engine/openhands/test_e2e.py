"""OpenHands end to end: the real SDK in the bwrap sandbox, through the real service and gateway.

Only the model is scripted (the gateway's scripted provider); the store, worktree, sandbox,
runtime venv, SDK, tools and commit gate are real. Each run costs ~8-15 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from synthorg.domain import ConfirmationPolicy, ConversationStatus, RiskLevel, TerminationReason
from synthorg.engine import Decision
from synthorg.service.options import RunOptions
from synthorg.store.reconcile import reconcile
from tests.sandbox.helpers import sandboxes_in

from .conftest import Booter
from .e2e_support import make_task

# Each run starts the SDK in a sandbox: minutes on a loaded host, so waits are generous.
pytestmark = [pytest.mark.openhands, pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(900)]


def _leftovers(home: Path) -> list[psutil.Process]:
    """This test's sandboxes (their bwrap works in a worktree under its data dir), everything
    under them, and the scripted ``sleep 67.25`` wherever it runs. Other suites' sandboxes on
    the same host are not ours to judge."""
    found: list[psutil.Process] = []
    ours = {p.pid for p in sandboxes_in(home)}  # by host-side cwd: argv names no host path
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.pid in ours or cmd[:2] == ["sleep", "67.25"]:
            found.append(proc)
            with contextlib.suppress(psutil.Error):
                found.extend(proc.children(recursive=True))
    return found


async def _no_leftovers(home: Path, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while (alive := _leftovers(home)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not alive, [p.info for p in alive]


async def _wait_for(components, conversation_id: str, kind: str, timeout: float = 240.0):  # type: ignore[no-untyped-def]
    async def find():  # type: ignore[no-untyped-def]
        async for stored in components.store.tail(conversation_id):
            if stored.event.kind == kind:
                return stored.event

    return await asyncio.wait_for(find(), timeout)


async def test_fix_edits_runs_a_command_finishes_and_lands(
    booted: Booter, demo_repo: Path, home: Path
) -> None:
    async with booted("openhands_fix_script") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        result = await service.run(record.id)
        gateway = await components.gateway.usage(result.execution_id)
        history = await components.store.history(record.id, limit=1000)

    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    assert result.loop_type == "openhands" and result.commit_sha is not None
    tools = [t.tool_names[0] for t in result.turns]
    assert tools == ["terminal", "file_editor", "file_editor", "terminal", "finish"]
    # Per-turn deltas of the runtime's running cost sum to its total, which is what the
    # gateway (the authoritative sink) metered for this execution.
    assert sum(t.cost_usd for t in result.turns) == result.usage.cost_usd > 0
    assert abs(result.usage.cost_usd - gateway.cost_usd) <= Decimal("1e-9")
    assert result.usage.tokens_in == gateway.tokens_in
    assert result.usage.tokens_out == gateway.tokens_out
    branch_file = subprocess.run(
        ["git", "show", f"{result.branch}:calc.py"], cwd=demo_repo, capture_output=True, text=True
    ).stdout
    assert "return a + b" in branch_file
    assert "return a - b" in (demo_repo / "calc.py").read_text()  # the checkout is untouched
    kinds = [s.event.kind for s in history]
    assert kinds.count("action") == 5 and kinds.count("observation") == 5
    assert "finished" in kinds
    observations = [s.event for s in history if s.event.kind == "observation"]
    assert observations[-2].exit_code == 0  # type: ignore[union-attr]  # the re-test passed
    # SDK state persists outside the worktree, keyed by the conversation.
    state = home / "openhands" / record.id
    assert any(state.rglob("base_state.json"))
    assert not any(Path(record.workspace.path).rglob("base_state.json"))  # type: ignore[union-attr]
    await _no_leftovers(home)


async def test_budget_kill_mid_run(booted: Booter, demo_repo: Path, home: Path) -> None:
    budget = Decimal("0.03")  # a turn costs ~$0.013
    async with booted("openhands_endless_script") as components:
        service = components.service
        record = await service.create(
            make_task(demo_repo), RunOptions(loop="openhands", budget_usd=budget, max_turns=50)
        )
        result = await service.run(record.id)
        gateway = await components.gateway.usage(result.execution_id)
    assert result.termination_reason is TerminationReason.BUDGET_EXHAUSTED, result.error
    assert 1 < len(result.turns) < 10
    # Killed once a request took it over, or stopped short when the next request could not fit.
    assert gateway.cost_usd >= budget or "left of its cost ceiling" in (result.error or "")
    assert result.commit_sha is None
    await _no_leftovers(home)


async def test_cancelling_the_awaiting_coroutine_leaves_no_process(
    booted: Booter, demo_repo: Path, home: Path
) -> None:
    async with booted("openhands_sleep_script") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        await service.start(record.id)
        await _wait_for(components, record.id, "action")

        async def sleeping() -> None:  # the scripted command runs inside the sandbox
            while not any(
                (p.info["cmdline"] or [])[:2] == ["sleep", "67.25"]
                for p in psutil.process_iter(["cmdline"])
            ):
                await asyncio.sleep(0.05)

        await asyncio.wait_for(sleeping(), 120)
        assert _leftovers(home)
        await service.cancel(record.id, by="tester")
        result = await service.wait(record.id)
        final = await components.store.get_conversation(record.id)
    assert result is not None and result.termination_reason is TerminationReason.CANCELLED
    assert final.status is ConversationStatus.CANCELLED
    await _no_leftovers(home, timeout=2.0)


async def test_risky_action_waits_for_confirmation_then_approved_by_id(
    booted: Booter, demo_repo: Path
) -> None:
    (demo_repo / "doomed.txt").write_text("x")
    subprocess.run(["git", "add", "doomed.txt"], cwd=demo_repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "doomed"],
        cwd=demo_repo,
        check=True,
    )
    async with booted("openhands_risky_script") as components:
        service = components.service
        options = RunOptions(loop="openhands", confirmation_policy=ConfirmationPolicy.RISKY)
        record = await service.create(make_task(demo_repo), options)
        await service.start(record.id)
        request = await _wait_for(components, record.id, "confirmation_request")
        for _ in range(100):  # the status follows the durable request event
            waiting = await components.store.get_conversation(record.id)
            if waiting.status is ConversationStatus.WAITING_CONFIRMATION:
                break
            await asyncio.sleep(0.02)
        worktree = Path(record.workspace.path)  # type: ignore[union-attr]
        assert (worktree / "doomed.txt").exists()  # nothing ran before the decision
        (pending,) = request.pending
        assert pending.risk is RiskLevel.HIGH and pending.tool_name == "terminal"
        await service.decide(
            record.id,
            Decision(accepted=frozenset({pending.action_id}), rejected=frozenset(), approver="ann"),
        )
        result = await service.wait(record.id)
        history = await components.store.history(record.id, limit=1000)
    assert waiting.status is ConversationStatus.WAITING_CONFIRMATION
    assert result is not None
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    decision = next(s.event for s in history if s.event.kind == "confirmation_decision")
    assert decision.accepted == (pending.action_id,) and decision.approver == "ann"  # type: ignore[union-attr]
    assert not (worktree / "doomed.txt").exists() and (worktree / "removed.txt").exists()
    assert result.commit_sha is not None


async def test_finish_without_work_is_no_op(booted: Booter, demo_repo: Path) -> None:
    async with booted("openhands_idle_script") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        result = await service.run(record.id)
    assert result.termination_reason is TerminationReason.NO_OP
    assert result.commit_sha is None and result.tool_calls == 1


async def test_resume_after_the_host_was_killed(
    booted: Booter, demo_repo: Path, tmp_path: Path, home: Path
) -> None:
    script = "synthorg.engine.openhands.scripts:openhands_progress_five"
    driver = Path(__file__).with_name("host_driver.py")
    with (tmp_path / "host.stderr").open("w") as stderr:
        host = subprocess.Popen(
            [sys.executable, str(driver), str(home), str(demo_repo), script],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert host.stdout is not None
        conversation_id = json.loads(host.stdout.readline())["conversation_id"]
        worktree = home / "worktrees"
        deadline = time.monotonic() + 240  # an SDK start-up takes minutes on a loaded host
        while time.monotonic() < deadline:
            done = [p.read_text().split() for p in worktree.rglob("progress.txt")]
            if done and len(done[0]) >= 2:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the host never got two lines done")
        os.kill(host.pid, signal.SIGKILL)
        host.wait(10)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(10)
        assert host.stdout is not None
        host.stdout.close()
    killed_at = len(done[0])
    await _no_leftovers(home)  # --die-with-parent took the sandbox down with its host

    async with booted(script) as components:
        await reconcile(components.store)
        result = await components.service.run(conversation_id)
        final = await components.store.get_conversation(conversation_id)
    assert result.resumed
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    lines = next(worktree.rglob("progress.txt")).read_text().split()
    assert sorted(set(lines)) == ["1", "2", "3", "4", "5"]
    assert len(lines) <= 6  # at most the command in flight at the kill ran twice
    # The SDK re-attached to its persisted conversation: only the remaining work was done.
    terminal = [t for t in result.turns if t.tool_names == ("terminal",)]
    assert len(terminal) <= 5 - killed_at + 1
    assert final.runs == 2
