"""The git processes a run's worktree costs: none that the result does not need.

A small tree's change journal watches it whole (listing its ignored directories costs a
``git ls-files`` per journal start); a new worktree's branch is written in-process
(``worktree add -b`` starts a ``git branch``); a second worktree of the same repository
reuses the first one's config listing (which filter drivers to disarm); the repository is
probed in-process as ``git rev-parse`` would.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.git import run_git_sync
from synthorg.workspace.journal import JOURNALS
from synthorg.workspace.snapshot import journal_key
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, logging_git, make_repo


def _commands(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


async def test_a_small_tree_is_watched_whole_without_listing_its_ignored_dirs(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {".gitignore": b"out/\n", "a.txt": b"a\n"})
    ws = await WorktreeManager(home).create(repo, "conv-small")
    (ws.path / "out").mkdir()
    (ws.path / "out" / "old.bin").write_text("ignored\n")
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    store = CheckpointStore()
    (ws.path / "a.txt").write_text("edited\n")
    first = await store.create(ws)
    assert JOURNALS.get(journal_key(ws)) is not None
    (ws.path / "b.txt").write_text("new\n")
    (ws.path / "out" / "build.bin").write_text("ignored\n")
    second = await store.create(ws)
    third = await store.create(ws)  # nothing changed: no git at all
    # No listing of ignored dirs (the host-limits listing before a full add is another).
    assert not [line for line in log.read_text().splitlines() if "--ignored" in line]
    assert git(repo, "show", f"{first.tree}:a.txt") == "edited\n"
    assert git(repo, "ls-tree", "-r", "--name-only", second.tree).split() == [
        ".gitignore",
        "a.txt",
        "b.txt",
    ]
    assert third.tree == second.tree
    await WorktreeManager(home).remove(ws)


async def test_a_second_worktree_lists_no_config_and_starts_no_git_branch(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    manager = WorktreeManager(home)
    first = await manager.create(repo, "conv-one")
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    second = await manager.create(repo, "conv-two")
    commands = _commands(log)
    assert "config" not in commands and "branch" not in commands, commands
    assert (second.path / "a.txt").read_text() == "a\n"
    head = (second.git_dir / "HEAD").read_text() if second.git_dir else ""
    assert head == "ref: refs/heads/synthorg/conv-two\n"
    assert git(repo, "rev-parse", "synthorg/conv-two") == git(repo, "rev-parse", "HEAD")
    for ws in (first, second):
        await manager.remove(ws, delete_branch=True)


async def test_a_config_include_or_new_driver_is_listed_again(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared listing holds only while the repository's config is unchanged and names
    no include: a driver added later is disarmed in the next worktree too."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", ".gitattributes": b"*.txt filter=evil\n"})
    manager = WorktreeManager(home)
    first = await manager.create(repo, "conv-one")
    marker = tmp_path / "ran"
    git(repo, "config", "filter.evil.smudge", f"touch {marker}; cat")
    git(repo, "config", "filter.evil.clean", f"touch {marker}; cat")
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    second = await manager.create(repo, "conv-two")
    assert "config" in _commands(log)
    (second.path / "a.txt").write_text("b\n")
    await CheckpointStore().create(second)
    assert not marker.exists()
    included = tmp_path / "included.cfg"
    included.write_text("[core]\n\tbigFileThreshold = 1m\n")
    git(repo, "config", "include.path", str(included))
    os.truncate(log, 0)
    third = await manager.create(repo, "conv-three")
    fourth = await manager.create(repo, "conv-four")
    assert _commands(log).count("config") == 2  # an include: every worktree lists again
    assert not marker.exists()
    for ws in (first, second, third, fourth):
        await manager.remove(ws, delete_branch=True)


async def test_the_in_process_probe_answers_as_git_does(tmp_path: Path) -> None:
    from synthorg.workspace.git import run_git
    from synthorg.workspace.repo import probe_repo

    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "sub/b.txt": b"b\n"})
    (tmp_path / "via").symlink_to(repo)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    for path in (repo, tmp_path / "via", repo / "sub", linked):
        out = await run_git(
            ["rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir",
             "--git-common-dir"],
            path,
        )  # fmt: skip
        probe = await probe_repo(path)
        assert not isinstance(probe, str)
        assert [str(probe.toplevel), str(probe.git_dir), str(probe.common_dir)] == (
            out.text.splitlines()
        ), path
    assert await probe_repo(tmp_path) == "not a git repository"


async def test_a_small_trees_checkpoint_writes_its_tree_in_process(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its private index is not split, so libgit2 reads it: no ``git write-tree``, and the
    tree git would write (a symlink, an executable, a nested repository's gitlink)."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "d/b.txt": b"b\n"})
    ws = await WorktreeManager(home).create(repo, "conv-tree")
    (ws.path / "a.txt").write_text("edited\n")
    (ws.path / "run.sh").write_text("#!/bin/sh\n")
    (ws.path / "run.sh").chmod(0o755)
    (ws.path / "link").symlink_to("a.txt")
    nested = ws.path / "sub"
    make_repo(nested, {"s.txt": b"s\n"})
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    made = await CheckpointStore().create(ws)
    assert "write-tree" not in " ".join(log.read_text().split()), log.read_text()
    assert ws.git_dir is not None
    by_git = run_git_sync(
        ["write-tree"],
        ws.path,
        env={"GIT_INDEX_FILE": str(ws.git_dir / "synthorg" / "snapshot.index")},
    )
    assert made.tree == by_git.text.strip()
    listing = git(repo, "ls-tree", "-r", made.tree)
    assert "120000 blob" in listing and "100755 blob" in listing and "160000 commit" in listing
    await WorktreeManager(home).remove(ws, delete_branch=True)


async def test_a_big_trees_index_stays_split_and_git_writes_its_tree(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {f"f/{n}.txt": b"x\n" for n in range(2100)})
    ws = await WorktreeManager(home).create(repo, "conv-big")
    (ws.path / "f" / "0.txt").write_text("edited\n")
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    made = await CheckpointStore().create(ws)
    assert "write-tree" in log.read_text() and "core.splitIndex=true" in log.read_text()
    assert git(repo, "show", f"{made.tree}:f/0.txt") == "edited\n"
    await WorktreeManager(home).remove(ws, delete_branch=True)
