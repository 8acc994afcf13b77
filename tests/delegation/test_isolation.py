"""A child cannot read or write its parent's or a sibling's worktree (sandbox attack test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.domain import ObservationEvent
from synthorg.service.options import RunOptions
from tests import support

from .conftest import WORDS, Booter
from .scripts import delegate

pytestmark = pytest.mark.bwrap


async def test_children_see_only_their_own_worktree(booted: Booter, repo: Path) -> None:
    async with booted() as components:
        home = components.settings.home
        spy = {"prompt": f"SPY {home}"}
        parent = await components.service.create(
            support.make_task(repo, delegate(spy, spy)), RunOptions()
        )
        await components.service.run(parent.id)
        children = await components.store.list_children(parent.id)
        assert len(children) == 2
        worktrees = sorted(home.glob("worktrees/*/*/notes.txt"))
        assert len(worktrees) == 3  # the parent's and both children's exist on the host
        for notes in worktrees:
            assert notes.read_text() == "".join(f"{w}\n" for w in WORDS), notes
        for child in children:
            events = await components.store.history(
                child.id, kinds=frozenset({"observation"}), limit=100
            )
            output = next(e.event.content for e in events if isinstance(e.event, ObservationEvent))
            # The host's worktrees dir is not in the sandbox at all: nothing matched, nothing
            # was read or written.
            assert "READ" not in output and "WROTE" not in output, output
            assert "No such file or directory" in output, output
