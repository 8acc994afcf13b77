"""``CheckpointStore.prepare``: the whole scan now, the checkpoint later adds what changed.

A run prepares its first checkpoint as soon as its sandbox is up (service/loops.py); what
the tree gains or loses before the checkpoint is taken must be in it, found by the change
journal rather than by a second whole scan.
"""

from __future__ import annotations

from pathlib import Path

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo


async def test_a_change_after_the_early_scan_is_in_the_checkpoint(
    tmp_path: Path, home: Path, full_scans: list[str]
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "d/b.txt": b"b\n", "d/gone.txt": b"g\n"})
    ws = await WorktreeManager(home).create(repo, "conv-prepare")
    store = CheckpointStore()
    await store.prepare(ws)
    assert len(full_scans) == 1
    (ws.path / "a.txt").write_text("changed after the scan\n")
    (ws.path / "d" / "new.txt").write_text("new\n")
    (ws.path / "d" / "gone.txt").unlink()
    checkpoint = await store.create(ws)
    assert len(full_scans) == 1  # no second whole scan: the journal named what changed
    listed = git(ws.path, "ls-tree", "-r", "--name-only", checkpoint.sha).split()
    assert listed == ["a.txt", "d/b.txt", "d/new.txt"]
    assert git(ws.path, "show", f"{checkpoint.sha}:a.txt") == "changed after the scan\n"
