"""The inotify change journal: what it reports, when it gives up, and checkpoints through it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from synthorg.workspace import snapshot
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.journal import JOURNALS, Journal, JournalRegistry
from synthorg.workspace.snapshot import journal_key
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo, tree_state

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux-only")


@pytest.fixture(autouse=True)
def journal_for_every_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """These trees are small; a journal is started only for trees of thousands of files."""
    monkeypatch.setattr(snapshot, "_JOURNAL_MIN_ENTRIES", 0)


def test_reports_files_dirs_and_deletions(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "old.txt").write_text("x")
    (tmp_path / "skipme").mkdir()
    journal = Journal(tmp_path, skip={"skipme"})
    assert journal.start()
    try:
        assert journal.drain().paths == set()
        (tmp_path / "d" / "old.txt").write_text("changed")
        (tmp_path / "top.txt").write_text("new")
        (tmp_path / "skipme" / "ignored.bin").write_text("not watched")
        os.makedirs(tmp_path / "n1" / "n2")
        (tmp_path / "n1" / "n2" / "deep.txt").write_text("deep")
        first = journal.drain()
        assert not first.everything
        assert {"d/old.txt", "top.txt", "n1"} <= first.paths
        assert not any(p.startswith("skipme") for p in first.paths)
        # The new directory is watched from now on.
        (tmp_path / "n1" / "n2" / "later.txt").write_text("later")
        (tmp_path / "d" / "old.txt").unlink()
        second = journal.drain()
        assert second.paths == {"n1/n2/later.txt", "d/old.txt"}
        assert journal.drain().paths == set()
        # A watched directory moving makes every remembered path suspect.
        os.rename(tmp_path / "n1", tmp_path / "moved")
        assert journal.drain().everything
    finally:
        journal.close()
    assert not journal.active and journal.drain().everything


def test_registry_evicts_and_closes() -> None:
    registry = JournalRegistry(limit=2)
    journals = []
    for i in range(3):
        journal = Journal(Path("/"), skip=set())
        journal._fd = os.open(os.devnull, os.O_RDONLY)  # a stand-in fd: only closing is tested
        journals.append(journal)
        registry.add(str(i), journal)
    assert not journals[0].active and journals[1].active and journals[2].active
    assert registry.get("0") is None and registry.get("2") is journals[2]
    registry.discard("1")
    registry.discard("2")
    assert not journals[1].active and not journals[2].active


async def test_checkpoints_go_through_the_journal(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {".gitignore": b"out/\n", "a.txt": b"a\n", "src/m.py": b"m = 1\n"})
    ws = await WorktreeManager(home).create(repo, "conv-j")
    assert ws.git_dir is not None
    key = journal_key(ws)
    store = CheckpointStore()
    await store.create(ws)
    journal = JOURNALS.get(key)
    assert journal is not None and journal.active

    # Quick nested creation right after a mkdir, an edit, and an ignored dir.
    os.makedirs(ws.path / "x" / "y" / "z")
    (ws.path / "x" / "y" / "z" / "f.txt").write_text("nested\n")
    (ws.path / "src" / "m.py").write_text("m = 2\n")
    (ws.path / "out").mkdir()
    (ws.path / "out" / "build.bin").write_text("ignored\n")
    cp = await store.create(ws)
    names = git(repo, "ls-tree", "-r", "--name-only", cp.tree).split()
    assert "x/y/z/f.txt" in names and "out/build.bin" not in names
    assert git(repo, "show", f"{cp.tree}:src/m.py") == "m = 2\n"
    assert JOURNALS.get(key) is journal  # no restart was needed

    # Un-ignoring a directory the journal never watched is still picked up.
    (ws.path / ".gitignore").write_text("")
    cp2 = await store.create(ws)
    assert "out/build.bin" in git(repo, "ls-tree", "-r", "--name-only", cp2.tree).split()

    # Rollback through the journal, then removal stops watching.
    expected = tree_state(ws.path)
    (ws.path / "x" / "y" / "z" / "f.txt").unlink()
    (ws.path / "brand.txt").write_text("new\n")
    await store.rollback(ws, cp2.index)
    assert tree_state(ws.path) == expected
    await WorktreeManager(home).remove(ws)
    assert JOURNALS.get(key) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
async def test_a_filesystem_mounted_over_the_worktree_is_not_missed(
    tmp_path: Path, home: Path
) -> None:
    # A sandbox's disk quota mounts an image over the worktree for the run: the journal's
    # watches then see the layer underneath, where nothing is written. Checkpoints (and the
    # NO_OP check) must notice the mount and scan, not report a stale tree.
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    ws = await WorktreeManager(home).create(repo, "conv-mount")
    store = CheckpointStore()
    first = await store.create(ws)  # starts the journal on the plain directory
    layer = tmp_path / "layer"
    layer.mkdir()
    for name in os.listdir(ws.path):  # what the quota does: a copy of the tree, mounted over
        if name != ".git":
            os.link(ws.path / name, layer / name)
    (layer / ".git").write_bytes((ws.path / ".git").read_bytes())
    subprocess.run(["mount", "--bind", str(layer), str(ws.path)], check=True)
    try:
        (ws.path / "written-in-the-sandbox.txt").write_text("new\n")
        second = await store.create(ws)
        assert second.tree != first.tree
        names = git(repo, "ls-tree", "--name-only", second.tree).split()
        assert "written-in-the-sandbox.txt" in names
    finally:
        subprocess.run(["umount", str(ws.path)], check=True)
    # Back on the plain directory (the image released): noticed again.
    third = await store.create(ws)
    assert "written-in-the-sandbox.txt" not in git(repo, "ls-tree", "--name-only", third.tree)


def test_a_dir_made_while_the_watches_were_placed_is_watched_once_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory made after its parent was listed and before the parent's watch landed is
    seen by no watch (simulated: the walk does not list it). Noted as a directory of the
    overlay's upper (``snapshot._upper_paths`` after the watches are placed), it is named and
    watched from then on, so a later write in it is reported."""
    from synthorg.workspace import journal as journal_module

    (tmp_path / "d").mkdir()
    (tmp_path / "late").mkdir()
    real_walk = os.walk

    def walk_without_late(top: object, *args: object, **kwargs: object) -> object:
        for dirpath, dirnames, files in real_walk(top, *args, **kwargs):  # type: ignore[call-overload]
            dirnames[:] = [d for d in dirnames if d != "late"]
            yield dirpath, dirnames, files

    monkeypatch.setattr(journal_module.os, "walk", walk_without_late)
    journal = Journal(tmp_path, skip=set())
    assert journal.start()
    monkeypatch.setattr(journal_module.os, "walk", real_walk)
    try:
        (tmp_path / "late" / "before.txt").write_text("x")  # no watch sees it
        journal.note({"late", "late/before.txt"}, {"late"})
        (tmp_path / "late" / "after.txt").write_text("y")
        changes = journal.drain()
        assert {"late", "late/before.txt", "late/after.txt"} <= changes.paths, changes
        assert not changes.everything
        journal.note(None)
        assert journal.drain().everything
    finally:
        journal.close()


def test_a_noted_dir_swapped_for_a_symlink_is_not_walked(tmp_path: Path) -> None:
    """A directory of the upper the agent swaps for a symlink (here to a host tree) before
    the journal watches it: following it would watch, and walk, the host's directories."""
    root, host = tmp_path / "root", tmp_path / "host"
    root.mkdir()
    (host / "a" / "b").mkdir(parents=True)
    journal = Journal(root, skip=set())
    assert journal.start()
    try:
        (root / "late").symlink_to(host)
        (root / "deep").mkdir()
        (root / "deep" / "up").symlink_to(host)
        journal.note({"late", "deep/up/a"}, {"late", "deep/up/a"})
        watched = set(journal._wds.values())
        assert not any(w.startswith(("late", "deep/up")) for w in watched), watched
        assert {"late", "deep/up/a"} <= journal.drain().paths
    finally:
        journal.close()
