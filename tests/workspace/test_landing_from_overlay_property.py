"""The landing's tree from an overlay's record equals a scan of every file, whatever the run
did (issue 31; hypothesis over adversarial change lists).

The invariant: a scan of the layer under an overlay, plus the paths the overlay's upper
names at release (sandbox/upper.py: what it holds, and a whiteout for each entry of that
layer deleted), is the tree git writes from a fresh index of the final worktree. The
kernel's side is tested through real runs (tests/sandbox/test_landing_from_overlay.py,
test_redteam_landing.py); here the record is made by hand as the upper would hold it, so
the examples can be many and hostile: deletions of whole directories, a directory replaced
by a file and back, renames, mode and type changes, ignored and rule files, and files made
and deleted again, which leave no trace in an upper (no whiteout for what the layer under it
never had).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synthorg import overlaylog
from synthorg.workspace import snapshot, views
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo

BASE = {
    "a.txt": b"a\n", "b.txt": b"bb\n", "d/x.txt": b"x\n", "d/e/y.txt": b"y\n",
    "d/e/z.txt": b"z\n", "f/g.txt": b"g\n", ".gitignore": b"*.log\n", "run.sh": b"#!/bin/sh\n",
}  # fmt: skip
TRACKED_IGNORED = "d/kept.log"  # tracked despite .gitignore: it stays tracked when edited
PATHS = ["a.txt", "b.txt", "d", "d/x.txt", "d/e", "d/e/y.txt", "f", "f/g.txt", "n", "n/m.txt",
         "run.sh", "new.txt", "out.log", "c.txt", TRACKED_IGNORED]  # fmt: skip
OPS = ("write", "delete", "chmod", "symlink", "rename_to_c")


def _apply(root: Path, op: str, rel: str) -> set[str]:
    """Make one change as a run could; the paths an overlay's upper would name for it."""
    path = root / rel
    if op == "delete":
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        return {rel}
    if op == "rename_to_c":
        if not os.path.lexists(path) or path.is_dir():
            return set()
        os.replace(path, root / "c.txt")
        return {rel, "c.txt"}
    made = {rel}
    for parent in reversed(path.relative_to(root).parents[:-1]):
        at = root / parent
        if os.path.lexists(at) and (at.is_symlink() or not at.is_dir()):
            at.unlink()  # a file (or link) where a directory is wanted: replaced
        if not at.is_dir():
            at.mkdir()
            made.add(str(parent))  # a new directory is in the upper whole
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)  # a file replacing a directory: the dir is replaced whole
    if op == "symlink":
        if os.path.lexists(path):
            path.unlink()
        path.symlink_to("a.txt")
    elif op == "chmod":
        if not path.is_file() or path.is_symlink():
            path.unlink(missing_ok=True)
            path.write_bytes(b"made\n")
        path.chmod(path.stat().st_mode ^ 0o100)
    else:
        if path.is_symlink():
            path.unlink()
        path.write_bytes(f"{op} {rel}\n".encode())
    return made


def _scratch_tree(worktree: Path, index: Path) -> str:
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    for args in (["read-tree", "HEAD"], ["add", "-A"]):
        subprocess.run(["git", *args], cwd=worktree, env=env, check=True, capture_output=True)
    return subprocess.run(
        ["git", "write-tree"], cwd=worktree, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _entries(root: Path) -> set[str]:
    return {
        str(Path(top, name).relative_to(root))
        for top, dirs, files in os.walk(root)
        for name in (*dirs, *files)
        if ".git" not in Path(top, name).relative_to(root).parts
    }


async def _one(
    tmp: Path, changes: list[tuple[str, str]], split: bool = False
) -> tuple[str, str, bool]:
    repo = tmp / "proj"
    make_repo(repo, BASE)
    (repo / TRACKED_IGNORED).write_bytes(b"kept\n")
    git(repo, "add", "-f", TRACKED_IGNORED)
    git(repo, "commit", "-q", "-m", "a file tracked despite .gitignore")
    ws = await WorktreeManager(tmp / "home").create(repo, "conv-prop")
    snapshot._SPLIT[snapshot.journal_key(ws)] = split  # a big tree's index is split
    upper = tmp / "upper"
    upper.mkdir()  # empty: the overlay has changed nothing when the first scan reads the layer
    overlaylog.mounted(ws.path, "token-1", upper=upper, lower=ws.path)
    await CheckpointStore().create(ws)  # the run's first checkpoint: a scan of that layer
    lower = _entries(ws.path)
    touched: set[str] = set()
    for op, rel in changes:
        touched |= _apply(ws.path, op, rel)
    # What the upper names at release: every touched path still there, a whiteout for each
    # one the layer had; a path made and deleted again leaves nothing.
    named = {p for p in touched if os.path.lexists(ws.path / p) or p in lower}
    overlaylog.released(ws.path, "token-1", frozenset(named))
    snap, _ = await views.scan_changes(ws, overlay=True)
    return snap.tree, _scratch_tree(ws.path, tmp / "scratch.index"), snap.from_overlay


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(PATHS)), min_size=1, max_size=6),
    st.booleans(),
)
def test_the_overlay_record_plus_the_last_whole_scan_is_the_tree(
    changes: list[tuple[str, str]], split: bool
) -> None:
    with tempfile.TemporaryDirectory() as raw:
        tree, expected, from_overlay = asyncio.run(_one(Path(raw), changes, split))
    assert tree == expected, changes
    # A changed ignore file is one the record cannot cover: then it is a full scan.
    assert from_overlay or any(rel == ".gitignore" for _, rel in changes), changes


async def test_a_write_after_the_release_is_never_hidden_by_the_record(
    tmp_path: Path, home: Path
) -> None:
    """The record is taken once, and any later scan of every file drops it: a host-side
    write after a landing (or instead of one) is found by the next scan."""
    repo = tmp_path / "proj"
    make_repo(repo, BASE)
    ws = await WorktreeManager(home).create(repo, "conv-once")
    (tmp_path / "upper").mkdir()
    overlaylog.mounted(ws.path, "token-2", upper=tmp_path / "upper", lower=ws.path)
    await CheckpointStore().create(ws)
    (ws.path / "a.txt").write_text("run\n")
    overlaylog.released(ws.path, "token-2", frozenset({"a.txt"}))
    first, _ = await views.scan_changes(ws, overlay=True)
    assert first.from_overlay
    (ws.path / "b.txt").write_text("host, later\n")  # not in any record
    second, found = await views.scan_changes(ws, overlay=True)
    assert not second.from_overlay
    assert {c.path for c in found} == {"a.txt", "b.txt"}
    assert git(repo, "show", f"{second.tree}:b.txt") == "host, later\n"
