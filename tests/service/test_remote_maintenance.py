"""Rollback and delete of a remote project's conversation: what the remote keeps afterwards.

A real ``git daemon`` serves the project; two booted services with their own data dirs are
two machines. A rollback on a machine that never held the worktree works from the remote and
publishes the restored state as the newest checkpoint (so a resume anywhere keeps it); a
delete takes the conversation's checkpoint refs off the remote, and its branch with
``delete_branch``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from synthorg.domain import CheckpointEvent, Task, TerminationReason, new_id
from synthorg.errors import NotFoundError
from synthorg.service.demo import DEMO_TASK, create_demo_repo
from synthorg.service.options import RunOptions
from synthorg.settings import Settings
from tests.gitremote import GitDaemon
from tests.support import boot_real, scripted_settings

from .conftest import MODEL, SCRIPTS

pytestmark = pytest.mark.bwrap


def _task() -> Task:
    return Task(id=new_id("task"), project_id="proj", prompt=DEMO_TASK, repository="project:app")


def _tree(bare: Path, rev: str) -> str:
    return _rev(bare, f"{rev}^{{tree}}")


def _rev(bare: Path, rev: str) -> str:
    return subprocess.run(
        ["git", "-C", str(bare), "rev-parse", rev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _machine(tmp_path: Path, name: str, url: str) -> Settings:
    """One machine's settings: its own data dir; the store (a file) and the remote shared."""
    return scripted_settings(
        tmp_path / name,
        f"{SCRIPTS}:demo_fix_script",
        model=MODEL,
        projects={"app": {"remote": url}},
        store={"url": f"sqlite:///{tmp_path / 'store.db'}"},
    )


async def test_rollback_elsewhere_and_delete_leave_the_remote_as_documented(
    tmp_path: Path, daemon: GitDaemon
) -> None:
    daemon.publish("app", create_demo_repo(tmp_path / "source"))
    url = daemon.url("app")
    async with boot_real(_machine(tmp_path, "a", url)) as a:
        kept = await a.service.create(_task(), RunOptions())
        result = await a.service.run(kept.id)
        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        gone = await a.service.create(_task(), RunOptions())
        await a.service.run(gone.id)
    cps = f"refs/synthorg/checkpoints/{kept.id}/"
    before = daemon.refs("app", cps)
    assert len(before) >= 2, before
    bare = daemon.bare("app")
    first_tree = _tree(bare, f"{cps}0")

    # Another machine (its own data dir: no worktree of it) rolls back to checkpoint 0.
    async with boot_real(_machine(tmp_path, "b", url)) as b:
        with pytest.raises(NotFoundError):
            await b.service.rollback(kept.id, 999, by="olga")
        await b.service.rollback(kept.id, 0, by="olga")
        history = await b.store.history(kept.id, limit=10_000)
        published = [s.event for s in history if isinstance(s.event, CheckpointEvent)][-1]
        # The restored state is the remote's newest checkpoint: a resume anywhere keeps it.
        served = daemon.refs("app", cps)
        assert max(int(ref.rsplit("/", 1)[1]) for ref in served) == published.index
        assert published.index == len(before)
        assert _tree(bare, published.ref) == first_tree
        assert _rev(bare, f"synthorg/{kept.id}") == _rev(bare, f"{published.ref}^1")

        # Deleted: its checkpoints leave the remote, its branch (the landed work) stays.
        await b.service.delete(kept.id)
        assert daemon.refs("app", cps) == {}
        assert f"refs/heads/synthorg/{kept.id}" in daemon.refs("app")
        # With delete_branch the branch and the base ref go too; other conversations' stay.
        other = f"refs/synthorg/checkpoints/{gone.id}/"
        assert daemon.refs("app", other)
        await b.service.delete(gone.id, delete_branch=True)
        left = daemon.refs("app")
        assert not [ref for ref in left if gone.id in ref], left
        assert f"refs/heads/synthorg/{kept.id}" in left and f"refs/synthorg/base/{kept.id}" in left
        assert await b.store.executions_of(gone.id)  # the ledger keeps the deleted run's rows
