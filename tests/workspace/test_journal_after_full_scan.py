"""A full scan (the NO_OP check, the gate, the changes view) starts no change journal: the
run's sandbox mounts its quota image over the worktree, which would void a journal started
now, and the next checkpoint starts its own (scanning everything) when it needs one."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from synthorg.workspace import snapshot, views
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.journal import JOURNALS
from synthorg.workspace.snapshot import journal_key
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, logging_git, make_repo

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux-only")


@pytest.fixture(autouse=True)
def journal_for_every_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """These trees are small; a journal is started only for trees of thousands of files."""
    monkeypatch.setattr(snapshot, "_JOURNAL_MIN_ENTRIES", 0)


async def test_a_full_scan_lists_no_ignored_dirs_and_the_next_checkpoint_sees_everything(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {".gitignore": b"out/\n", "a.txt": b"a\n"})
    ws = await WorktreeManager(home).create(repo, "conv-full")
    key = journal_key(ws)
    (ws.path / "a.txt").write_text("edited\n")
    log = tmp_path / "argv.log"
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    changed = await views.changes(ws)
    monkeypatch.setenv("PATH", path)
    assert [c.path for c in changed] == ["a.txt"]
    # (The host-limits listing, ``ls-files --others --modified``, is no journal's.)
    listed = [line for line in log.read_text().splitlines() if line.startswith("ls-files")]
    assert not [line for line in listed if "--ignored" in line], listed
    assert JOURNALS.get(key) is None

    # The next checkpoints start the journal and miss nothing written in between.
    (ws.path / "new.txt").write_text("new\n")
    (ws.path / "out").mkdir()
    (ws.path / "out" / "build.bin").write_text("ignored\n")
    store = CheckpointStore()
    first = await store.create(ws)
    assert JOURNALS.get(key) is not None
    (ws.path / "later.txt").write_text("later\n")
    second = await store.create(ws)
    names = git(repo, "ls-tree", "-r", "--name-only", second.tree).split()
    assert names == [".gitignore", "a.txt", "later.txt", "new.txt"]
    assert git(repo, "show", f"{first.tree}:a.txt") == "edited\n"
    await WorktreeManager(home).remove(ws)
