"""What ``git add`` would hash, listed by stat data alone (workspace/hostlimits.pending).

The host-work bounds measure what a snapshot's ``git add`` would hash before it hashes
anything. Listed by content (``git ls-files --modified`` against the index as it is), git
hashed every racily clean entry to list it, and ``add`` then hashed each again: after a big
checkout tens of thousands of files twice before a run's first action. Listed by stat data,
an entry is left out only when its stat data (size among them) match, so the bound loses
nothing, and ``add`` still compares the content of such an entry: a same-size edit given its
old mtime back is still seen by the checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.hostlimits import pending
from synthorg.workspace.models import Workspace
from synthorg.workspace.snapshot import open_git
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo

FILES = {f"d{i // 10}/f{i}.txt": f"file {i}\n".encode() for i in range(30)}


async def _racy_worktree(tmp_path: Path, home: Path) -> Workspace:
    """A fresh worktree whose own index is racy for every entry, git told not to look at
    ctime (so that an edit given its old size and mtime back matches by stat data)."""
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    git(repo, "config", "core.trustctime", "false")
    ws = await WorktreeManager(home).create(repo, "conv-pending")
    assert ws.git_dir is not None
    newest = max((ws.path / rel).stat().st_mtime_ns for rel in FILES)
    for rel in FILES:  # every entry in the second its index was written: all racily clean
        os.utime(ws.path / rel, ns=(newest, newest))
    git(ws.path, "update-index", "--refresh", "-q")
    os.utime(ws.git_dir / "index", ns=(newest, newest))
    return ws


def _edit_keeping_stat(path: Path) -> None:
    old = path.stat()
    path.write_bytes(path.read_bytes().upper())  # same size, other content
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))


async def test_racy_entries_are_listed_by_stat_and_their_edits_still_land(
    tmp_path: Path, home: Path
) -> None:
    ws = await _racy_worktree(tmp_path, home)
    edited = "d0/f1.txt"
    _edit_keeping_stat(ws.path / edited)
    # By content git sees it (it hashed every racy entry to say so) ...
    assert git(ws.path, "ls-files", "--modified").split() == [edited]
    (ws.path / "new.txt").write_text("new\n")
    (ws.path / "d1/f12.txt").write_text("a longer line than before\n")
    checkout = await open_git(ws)
    # ... by stat data only what differs there: the untracked file and the size change.
    assert await pending(checkout, {}) == ["d1/f12.txt", "new.txt"]
    assert ws.git_dir is not None
    assert not list(ws.git_dir.glob("*.stat"))  # the index's copy is gone
    checkpoint = await CheckpointStore().create(ws)
    # add still compares the racy entry's content: the checkpoint has the edit.
    shown = git(ws.path, "show", f"{checkpoint.sha}:{edited}")
    assert shown == FILES[edited].decode().upper()


async def test_no_index_lists_every_file(tmp_path: Path, home: Path) -> None:
    ws = await _racy_worktree(tmp_path, home)
    assert ws.git_dir is not None
    (ws.git_dir / "index").unlink()
    checkout = await open_git(ws)
    assert await pending(checkout, {}) == sorted(FILES)
