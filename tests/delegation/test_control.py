"""Control cascades from a parent to its live children; depth and fan-out limits refuse."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import psutil
import pytest

from synthorg.domain import (
    ConfirmationPolicy,
    ConversationRecord,
    ConversationStatus,
    TerminationReason,
)
from synthorg.engine import Decision
from synthorg.service.boot import Components
from synthorg.service.options import RunOptions
from tests import support

from .conftest import Booter
from .scripts import delegate, edit
from .test_merge import _delegate_observation

pytestmark = pytest.mark.bwrap


def _sandboxes_alive() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "bwrap" in p.name()]


async def _children_working(
    components: Components, parent_id: str, count: int, timeout: float = 60.0
) -> list[ConversationRecord]:
    """The parent's children once each has run a tool (waited for on their own event logs)."""

    async def observed(child_id: str) -> None:
        async for stored in components.store.tail(child_id):
            if stored.event.kind == "observation":
                return

    async def all_there() -> list[ConversationRecord]:
        while len(children := await components.store.list_children(parent_id)) < count:
            await asyncio.sleep(0.05)  # polled with the deadline below
        await asyncio.gather(*(observed(c.id) for c in children[:count]))
        return children

    return await asyncio.wait_for(all_there(), timeout)


@pytest.mark.parametrize(
    ("control", "parent_status", "child_status"),
    [
        ("cancel", ConversationStatus.CANCELLED, ConversationStatus.CANCELLED),
        ("interrupt", ConversationStatus.PAUSED, ConversationStatus.PAUSED),
    ],
)
async def test_stopping_the_parent_stops_its_children(
    booted: Booter,
    repo: Path,
    control: str,
    parent_status: ConversationStatus,
    child_status: ConversationStatus,
) -> None:
    async with booted(latency_ms=20) as components:
        service = components.service
        parent = await service.create(
            support.make_task(repo, delegate({"prompt": "SPIN"}, {"prompt": "SPIN"})),
            RunOptions(max_turns=500),
        )
        await service.start(parent.id)
        children = await _children_working(components, parent.id, 2)
        assert len(_sandboxes_alive()) >= 3  # the parent's and both children's
        await getattr(service, control)(parent.id, by="tester")
        result = await service.wait(parent.id)
        assert result is not None
        assert (await components.store.get_conversation(parent.id)).status is parent_status
        for child in children:
            assert not service.is_active(child.id)
            assert (await components.store.get_conversation(child.id)).status is child_status
        assert not _sandboxes_alive()


async def test_pausing_the_parent_pauses_its_children(booted: Booter, repo: Path) -> None:
    async with booted(latency_ms=20) as components:
        service = components.service
        parent = await service.create(
            support.make_task(repo, delegate({"prompt": "SPIN"}, {"prompt": "SPIN"})),
            RunOptions(max_turns=500),
        )
        await service.start(parent.id)
        children = await _children_working(components, parent.id, 2)
        await service.pause(parent.id, by="tester")
        result = await service.wait(parent.id)
        assert result is not None and result.termination_reason is TerminationReason.PAUSED
        for child in children:
            assert (await components.store.get_conversation(child.id)).status is (
                ConversationStatus.PAUSED
            )
        observation = (await _delegate_observation(components, parent.id)).content
        assert observation.count(": paused") == 2, observation
    assert not _sandboxes_alive()


async def test_fan_out_past_the_limit_is_refused(booted: Booter, repo: Path) -> None:
    prompt = delegate(
        {"prompt": edit("notes.txt", "alpha\n", "A\n")},
        {"prompt": edit("notes.txt", "bravo\n", "B\n")},
    )
    async with booted(delegation={"max_children": 1}) as components:
        parent = await components.service.create(support.make_task(repo, prompt), RunOptions())
        await components.service.run(parent.id)
        observation = await _delegate_observation(components, parent.id)
        assert observation.is_error
        assert observation.content.startswith(
            "delegation refused: 2 sub-tasks asked, at most 1 per call"
        )
        assert await components.store.list_children(parent.id) == []


async def test_depth_past_the_limit_is_refused(booted: Booter, repo: Path) -> None:
    grandchild = {"prompt": edit("notes.txt", "alpha\n", "A\n")}
    prompt = delegate({"prompt": delegate(grandchild)})
    async with booted(delegation={"max_depth": 1}) as components:
        parent = await components.service.create(support.make_task(repo, prompt), RunOptions())
        await components.service.run(parent.id)
        (child,) = await components.store.list_children(parent.id)
        refused = await _delegate_observation(components, child.id)
        assert refused.is_error
        assert "delegation refused: this conversation is 1 level(s) below its root" in (
            refused.content
        )
        assert await components.store.list_children(child.id) == []
        # The parent hears that its child did nothing (NO_OP is never a silent success).
        observation = (await _delegate_observation(components, parent.id)).content
        assert f"{child.id} [react]: no_op" in observation


async def test_a_childs_confirmation_is_decided_by_the_childs_id(
    booted: Booter, repo: Path
) -> None:
    prompt = delegate(
        {"prompt": edit("notes.txt", "alpha\n", "A\n")},
        {"prompt": edit("notes.txt", "hotel\n", "H\n")},
    )
    async with booted() as components:
        service, store = components.service, components.store
        parent = await service.create(
            support.make_task(repo, prompt),
            RunOptions(confirmation_policy=ConfirmationPolicy.ALWAYS),
        )
        await service.start(parent.id)
        decided: dict[str, int] = {}

        async def approve_until_done() -> None:
            while service.is_active(parent.id):
                ids = [parent.id, *(c.id for c in await store.list_children(parent.id))]
                for cid in ids:
                    active = service.active_run(cid)
                    pending = active.control.pending_actions if active is not None else frozenset()
                    if pending:
                        await service.decide(cid, Decision(pending, frozenset(), "tester"))
                        decided[cid] = decided.get(cid, 0) + 1
                await asyncio.sleep(0.05)  # polled under the deadline below

        await asyncio.wait_for(approve_until_done(), 120)
        result = await service.wait(parent.id)
        assert result is not None and result.termination_reason is TerminationReason.COMPLETED
        children = await store.list_children(parent.id)
        # The parent's delegate call and each child's edit waited, each under its own id.
        assert set(decided) == {parent.id, *(c.id for c in children)}
        for child in children:
            events = await store.history(child.id, kinds=frozenset({"confirmation_decision"}))
            assert events and all(e.event.approver == "tester" for e in events)  # type: ignore[union-attr]
            assert (await store.get_conversation(child.id)).status is ConversationStatus.FINISHED


async def test_delegating_to_openhands_is_refused(booted: Booter, repo: Path) -> None:
    prompt = delegate({"prompt": edit("notes.txt", "alpha\n", "A\n"), "loop": "openhands"})
    async with booted() as components:
        parent = await components.service.create(support.make_task(repo, prompt), RunOptions())
        await components.service.run(parent.id)
        observation = await _delegate_observation(components, parent.id)
        assert observation.is_error
        assert observation.content.startswith(
            "delegation refused: sub-tasks cannot run the openhands loop"
        )
        assert await components.store.list_children(parent.id) == []


async def test_a_sub_task_that_cannot_run_refuses_the_whole_call(
    booted: Booter, repo: Path
) -> None:
    prompt = delegate(
        {"prompt": edit("notes.txt", "alpha\n", "A\n")},
        {"prompt": edit("notes.txt", "hotel\n", "H\n"), "model": "no-such-model"},
    )
    async with booted() as components:
        parent = await components.service.create(support.make_task(repo, prompt), RunOptions())
        await components.service.run(parent.id)
        observation = await _delegate_observation(components, parent.id)
        assert observation.is_error
        assert observation.content.startswith("delegation refused: sub-task 2 cannot run")
        assert "no-such-model" in observation.content
        # All or nothing: the first child, already made, is gone with its worktree and branch.
        assert await components.store.list_children(parent.id) == []
        home = components.settings.home
        assert [p.name for p in (home / "worktrees").iterdir() if p.is_dir()] == [parent.id]
        branches = subprocess.run(
            ["git", "for-each-ref", "--format=%(refname:short)", "refs/heads/synthorg/"],
            cwd=repo,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert branches == [f"synthorg/{parent.id}"]


async def test_cancel_also_ends_children_still_waiting_for_their_turn(
    booted: Booter, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with booted(latency_ms=20, delegation={"max_concurrent": 1}) as components:
        service, store = components.service, components.store
        parent = await service.create(
            support.make_task(repo, delegate({"prompt": "SPIN"}, {"prompt": "SPIN"})),
            RunOptions(max_turns=500),
        )
        await service.start(parent.id)
        await _children_working(components, parent.id, 1)
        first, second = await store.list_children(parent.id)
        assert (await store.get_conversation(second.id)).status is ConversationStatus.CREATED
        await service.cancel(parent.id, by="tester")
        await service.wait(parent.id)
        ran = await store.get_conversation(first.id)
        waited = await store.get_conversation(second.id)
        assert ran.status is ConversationStatus.CANCELLED and ran.runs == 1
        assert waited.status is ConversationStatus.CANCELLED and waited.runs == 0
        assert waited.termination_reason is TerminationReason.CANCELLED
    assert not _sandboxes_alive()
    # The child that never ran ends through the runner's one close, like every run.
    [logged] = support.terminations_logged(capsys.readouterr().err, second.id)
    assert logged["termination_reason"] == "cancelled"
