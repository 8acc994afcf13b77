"""Delegation end to end: real worktrees, gateway, bwrap sandboxes, host merge, the ledger."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from synthorg.domain import ConversationStatus, ObservationEvent, TerminationReason
from synthorg.service.boot import Components
from synthorg.service.options import RunOptions
from tests import support

from .conftest import WORDS, Booter
from .scripts import delegate, edit

pytestmark = pytest.mark.bwrap


def _sandboxes_alive() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "bwrap" in p.name()]


async def _delegate_observation(components: Components, conversation_id: str) -> ObservationEvent:
    events = await components.store.history(
        conversation_id, kinds=frozenset({"action", "observation"}), limit=1000
    )
    action_ids = {
        e.event.action_id
        for e in events
        if e.event.kind == "action" and e.event.tool_name == "delegate"  # type: ignore[union-attr]
    }
    found = [
        e.event
        for e in events
        if isinstance(e.event, ObservationEvent) and e.event.action_id in action_ids
    ]
    assert len(found) == 1, events
    return found[0]


def _show(repo: Path, rev: str) -> str:
    return subprocess.run(
        ["git", "show", rev], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


async def test_two_children_edit_one_file_in_different_places_and_merge_cleanly(
    booted: Booter, repo: Path
) -> None:
    prompt = delegate(
        {"prompt": edit("notes.txt", "alpha\n", "ALPHA (child one)\n"), "paths": ["notes.txt"]},
        {"prompt": edit("notes.txt", "hotel\n", "HOTEL (child two)\n")},
    )
    async with booted() as components:
        service = components.service
        parent = await service.create(
            support.make_task(repo, prompt), RunOptions(budget_usd=Decimal("1"))
        )
        result = await service.run(parent.id)
        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        observation = await _delegate_observation(components, parent.id)
        assert not observation.is_error, observation.content
        assert "merge: clean" in observation.content
        children = await components.store.list_children(parent.id)
        assert len(children) == 2
        for child in children:
            # Real conversations of their own: lineage, status, event log, their own run.
            assert child.parent_id == parent.id and child.root_id == parent.id
            assert child.status is ConversationStatus.FINISHED
            assert child.commit_sha is not None
            assert await components.store.last_seq(child.id) > 0
            assert child.workspace is not None and child.workspace.path != parent.workspace.path  # type: ignore[union-attr]
        assert len({c.execution_id for c in children} | {result.execution_id}) == 3
        # The host merged both into the parent's worktree; the parent's gate landed it.
        assert result.commit_sha is not None
        landed = _show(repo, f"{result.branch}:notes.txt")
        assert "ALPHA (child one)\n" in landed and "HOTEL (child two)\n" in landed
        assert landed.count("\n") == len(WORDS)
        # The user's checkout is untouched.
        assert (repo / "notes.txt").read_text() == "".join(f"{w}\n" for w in WORDS)
    assert not _sandboxes_alive()


async def test_same_lines_conflict_reported_and_parent_worktree_untouched(
    booted: Booter, repo: Path
) -> None:
    prompt = delegate(
        {"prompt": edit("notes.txt", "delta\n", "DELTA by one\n")},
        {"prompt": edit("notes.txt", "delta\n", "DELTA by two\n")},
    )
    async with booted() as components:
        service = components.service
        parent = await service.create(support.make_task(repo, prompt), RunOptions())
        result = await service.run(parent.id)
        observation = await _delegate_observation(components, parent.id)
        children = await components.store.list_children(parent.id)
        assert [c.status for c in children] == [ConversationStatus.FINISHED] * 2
        content = observation.content
        assert observation.is_error
        assert f"CONFLICT merging {children[1].id}" in content
        assert "--- notes.txt (yours):\nDELTA by one" in content
        assert f"+++ notes.txt ({children[1].id}):\nDELTA by two" in content
        # Nothing merged: the parent's worktree holds exactly what it held before.
        worktree = Path(parent.workspace.path)  # type: ignore[union-attr]
        assert (worktree / "notes.txt").read_text() == "".join(f"{w}\n" for w in WORDS)
        # The parent changed nothing itself: its run is NO_OP, never a silent success.
        assert result.termination_reason is TerminationReason.NO_OP
        # Each child's work stays on its own branch.
        assert "DELTA by two" in _show(repo, f"synthorg/{children[1].id}:notes.txt")
    assert not _sandboxes_alive()
