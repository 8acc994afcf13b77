"""Checkpoint commits written in-process (libgit2): same commits as git's, nothing executed."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.objects import refs_under
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import commit_shape, git, make_repo

FILES = {".gitignore": b"*.log\n", "a.txt": b"alpha\n", "d/b.txt": b"beta\n"}


async def test_in_process_checkpoints_are_the_commits_git_would_write(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-lg2")
    (ws.path / "a.txt").write_text("edited\n")
    by_lib = await CheckpointStore(in_process=True).create(ws)
    by_git = await CheckpointStore(in_process=False).create(ws)
    assert (by_lib.index, by_git.index) == (0, 1)
    assert by_lib.tree == by_git.tree
    lib_shape = commit_shape(repo, by_lib.sha)
    git_shape = commit_shape(repo, by_git.sha)
    # Identical but for the checkpoint number in the message.
    assert lib_shape == [line.replace(" 1 of ", " 0 of ") for line in git_shape]
    assert git(repo, "rev-parse", by_lib.ref).strip() == by_lib.sha
    git(repo, "fsck", "--strict", "--no-dangling")


async def test_a_number_taken_by_another_writer_is_skipped(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-taken")
    store = CheckpointStore()
    first = await store.create(ws)
    # Another process takes number 1 behind this store's cached counter.
    git(repo, "update-ref", "refs/synthorg/checkpoints/conv-taken/1", first.sha)
    second = await store.create(ws)
    assert second.index == 2
    assert git(repo, "rev-parse", "refs/synthorg/checkpoints/conv-taken/1").strip() == first.sha


async def test_in_process_checkpoints_run_no_hook_or_configured_program(
    tmp_path: Path, home: Path
) -> None:
    # What the repository's config names (hooks, fsmonitor, a filter on every file) must not
    # run for a checkpoint: libgit2 executes nothing, and the git processes left are hardened.
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    marker = tmp_path / "ran"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    script = f'#!/bin/sh\necho "$0" >> {marker}\ncat\n'
    for name in ("reference-transaction", "post-commit", "pre-commit", "post-index-change"):
        (hooks / name).write_text(script)
        (hooks / name).chmod(0o755)
    program = hooks / "program"
    program.write_text(script)
    program.chmod(0o755)
    git(repo, "config", "core.hooksPath", str(hooks))
    git(repo, "config", "core.fsmonitor", str(program))
    git(repo, "config", "filter.evil.clean", str(program))
    git(repo, "config", "filter.evil.smudge", str(program))
    ws = await WorktreeManager(home).create(repo, "conv-hooks")
    (ws.path / ".gitattributes").write_text("* filter=evil\n")
    (ws.path / "a.txt").write_text("edited\n")
    store = CheckpointStore()
    made = [await store.create(ws) for _ in range(3)]
    assert [c.index for c in made] == [0, 1, 2]
    assert not marker.exists(), marker.read_text()
    assert git(repo, "show", f"{made[0].tree}:a.txt") == "edited\n"


async def test_an_unchanged_worktree_gives_the_same_tree_and_a_change_a_new_one(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-same")
    store = CheckpointStore()
    first = await store.create(ws)
    again = await store.create(ws)
    assert again.tree == first.tree and again.sha != first.sha
    (ws.path / "a.txt").write_text("ALPHA\n")  # same size as before
    changed = await store.create(ws)
    assert changed.tree != first.tree
    assert git(repo, "show", f"{changed.tree}:a.txt") == "ALPHA\n"


async def test_checkpoint_refs_read_in_process_are_the_ones_git_lists(
    tmp_path: Path, home: Path
) -> None:
    # Loose and packed refs, a non-numbered ref and a sibling conversation whose id shares
    # the prefix: a fresh store numbers on from the conversation's own highest checkpoint.
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-refs")
    first = [await CheckpointStore().create(ws) for _ in range(3)]
    git(repo, "pack-refs", "--all")
    git(repo, "update-ref", "refs/synthorg/checkpoints/conv-refs/notes", first[0].sha)
    git(repo, "update-ref", "refs/synthorg/checkpoints/conv-refs2/9", first[0].sha)
    git(repo, "update-ref", "refs/synthorg/checkpoints/conv-refs/5", first[0].tree)  # no commit
    prefix = "refs/synthorg/checkpoints/conv-refs/"
    git(repo, "symbolic-ref", f"{prefix}7", f"{prefix}1")  # listed as what it points at
    git(repo, "symbolic-ref", f"{prefix}3", "refs/heads/nowhere")  # dangling: left out
    # Read by libgit2 itself (not its fallback to git): every ref under the prefix.
    names = [name for name, _, _ in refs_under(repo / ".git", prefix)]
    assert names == [f"{prefix}{n}" for n in ("0", "1", "2", "5", "7", "notes")]
    listed = await CheckpointStore().list(ws)
    assert listed == await CheckpointStore(in_process=False).list(ws)
    assert [c.index for c in listed] == [0, 1, 2, 5, 7]
    assert listed[3].tree == ""
    assert listed[:3] == first and listed[4].sha == first[1].sha
    assert (await CheckpointStore().create(ws)).index == 8
    got = await CheckpointStore().get(ws, 1)
    assert got == await CheckpointStore(in_process=False).get(ws, 1) == first[1]


@pytest.mark.parametrize("in_process", [True, False])
async def test_a_ref_lock_left_by_a_killed_writer_does_not_stop_the_next_checkpoint(
    tmp_path: Path, home: Path, in_process: bool
) -> None:
    # A run SIGKILLed while creating checkpoint n leaves refs/.../n.lock behind (neither
    # libgit2 nor git can remove it then); the resumed run's next checkpoint is n again. Seen
    # in the kill campaign (tests/faults/test_kills.py): the resume crashed on the lock.
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-killed")
    stale = repo / ".git" / "refs" / "synthorg" / "checkpoints" / "conv-killed" / "0.lock"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    made = await CheckpointStore(in_process=in_process).create(ws)
    assert made.index == 0
    assert git(repo, "rev-parse", made.ref).strip() == made.sha
    assert not stale.exists()
