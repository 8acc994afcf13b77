"""SIGKILL of the host mid-delegation, then resume: every child finishes, each exactly once."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from synthorg.domain import (
    ConversationStatus,
    ObservationEvent,
    StatusChangeEvent,
    TerminationReason,
)
from tests.delegation.conftest import Booter, crashing_host
from tests.delegation.scripts import delegate
from tests.delegation.test_control import _sandboxes_alive

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


_LEFT_BY_A_KILL = (ConversationStatus.RUNNING, ConversationStatus.INTERRUPTED)


async def test_sigkill_mid_delegation_then_resume_finishes_every_child_once(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    prompt = delegate(
        {"prompt": "SLOWSED s/^alpha$/ALPHA/"}, {"prompt": "SLOWSED s/^hotel$/HOTEL/"}
    )
    async with (
        crashing_host(tmp_path, repo, prompt) as (parent_id, kill),
        booted() as components,  # the same data dir: the same store
    ):
        store = components.store

        async def both_children_warm() -> list[str]:
            while True:
                children = await store.list_children(parent_id)
                warm = 0
                for child in children:
                    events = await store.history(child.id, kinds=frozenset({"observation"}))
                    warm += any(
                        isinstance(e.event, ObservationEvent) and "warm" in e.event.content
                        for e in events
                    )
                if len(children) == 2 and warm == 2:
                    return [c.id for c in children]
                await asyncio.sleep(0.05)  # polled under the deadline below

        child_ids = await asyncio.wait_for(both_children_warm(), 120)
        await kill()

    async with booted() as components:
        store, service = components.store, components.service
        for cid in (parent_id, *child_ids):
            # Still the dead owner's, or already swept by this boot (issue 29: the sweep runs
            # beside the boot, no reader needed): either way not ended.
            assert (await store.get_conversation(cid)).status in _LEFT_BY_A_KILL
        result = await service.run(parent_id)  # resumed, the children with it
        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        assert result.resumed
        children = await store.list_children(parent_id)
        assert [c.id for c in children] == child_ids  # the same two, none made twice
        for child in children:
            assert child.status is ConversationStatus.FINISHED
            assert child.runs == 2  # the run the kill interrupted, and its resumption
            events = await store.history(child.id, kinds=frozenset({"status_change"}), limit=1000)
            finished = [
                e
                for e in events
                if isinstance(e.event, StatusChangeEvent)
                and e.event.new is ConversationStatus.FINISHED
            ]
            assert len(finished) == 1
        landed = subprocess.run(
            ["git", "show", f"{result.branch}:notes.txt"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "ALPHA\n" in landed and "HOTEL\n" in landed
    assert not _sandboxes_alive()
