"""Checkpoints on real worktrees: hidden refs, untouched user state, exact rollback."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.errors import CheckpointNotFoundError, NotAGitWorkspaceError
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, ignored_files, index_bytes, make_repo, tree_state

FILES = {
    ".gitignore": b"*.log\n",
    "a.txt": b"alpha\n",
    "d/b.txt": b"beta\n",
    "d/e/c.sh": b"#!/bin/sh\necho c\n",
}


async def test_create_list_and_user_state_untouched(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-cp")
    assert ws.git_dir is not None
    (ws.path / "a.txt").write_text("edited\n")
    git(ws.path, "add", "a.txt")  # something staged by the "user"
    (ws.path / "new.txt").write_text("untracked\n")
    (ws.path / "x.log").write_text("ignored\n")
    status = git(ws.path, "status", "--porcelain=v1", "-uall")
    index = index_bytes(ws.git_dir)
    head = git(ws.path, "rev-parse", "HEAD").strip()

    store = CheckpointStore()
    first = await store.create(ws)
    second = await store.create(ws, "conv-cp")
    assert (first.index, second.index) == (0, 1)
    assert first.ref == "refs/synthorg/checkpoints/conv-cp/0"
    assert git(repo, "rev-parse", first.ref).strip() == first.sha
    assert git(repo, "rev-parse", f"{first.sha}^").strip() == head
    assert git(repo, "rev-parse", f"{first.sha}^{{tree}}").strip() == first.tree
    contents = git(repo, "ls-tree", "-r", "--name-only", first.tree).split()
    assert sorted(contents) == [".gitignore", "a.txt", "d/b.txt", "d/e/c.sh", "new.txt"]
    assert git(repo, "show", f"{first.tree}:a.txt") == "edited\n"

    assert index_bytes(ws.git_dir) == index
    assert git(ws.path, "rev-parse", "HEAD").strip() == head
    assert git(ws.path, "status", "--porcelain=v1", "-uall") == status
    assert git(ws.path, "symbolic-ref", "HEAD").strip() == "refs/heads/synthorg/conv-cp"
    assert [c.index for c in await store.list(ws)] == [0, 1]
    # Numbering survives a new store (a restarted process) by reading the refs.
    assert (await CheckpointStore().create(ws)).index == 2


async def test_rollback_restores_exactly(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-rb")
    (ws.path / "untracked.txt").write_text("was here\n")
    (ws.path / "keep.log").write_text("ignored, before\n")
    store = CheckpointStore()
    cp = await store.create(ws)
    before = tree_state(ws.path)

    (ws.path / "a.txt").write_text("mutated\n")
    (ws.path / "d" / "b.txt").unlink()
    (ws.path / "untracked.txt").unlink()
    (ws.path / "d" / "e" / "c.sh").chmod(0o755)
    (ws.path / "brand").mkdir()
    (ws.path / "brand" / "new.txt").write_text("new\n")
    (ws.path / "keep.log").write_text("ignored, after\n")
    (ws.path / "fresh.log").write_text("ignored, new\n")

    await store.rollback(ws, cp.index)

    assert tree_state(ws.path) == before
    assert not (ws.path / "brand").exists()
    # Ignored files are outside checkpoints: left exactly as the rollback found them.
    assert (ws.path / "keep.log").read_text() == "ignored, after\n"
    assert (ws.path / "fresh.log").exists()


async def test_rollback_undoes_a_commit_made_after_the_checkpoint(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-undo")
    head = git(ws.path, "rev-parse", "HEAD").strip()
    store = CheckpointStore()
    cp = await store.create(ws)
    (ws.path / "a.txt").write_text("committed by the agent\n")
    git(ws.path, "commit", "-q", "-am", "agent commit")
    await store.rollback(ws, cp.index)
    assert git(ws.path, "rev-parse", "HEAD").strip() == head
    assert (ws.path / "a.txt").read_text() == "alpha\n"
    assert git(ws.path, "status", "--porcelain") == ""


async def test_checkpoint_after_head_moves_keeps_force_added_ignored_files(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-head")
    store = CheckpointStore()
    await store.create(ws)
    (ws.path / "tracked.log").write_text("force-added\n")
    git(ws.path, "add", "-f", "tracked.log")
    git(ws.path, "commit", "-q", "-m", "track an ignored file")
    cp = await store.create(ws)
    assert "tracked.log" in git(repo, "ls-tree", "--name-only", cp.tree).split()
    (ws.path / "tracked.log").write_text("changed\n")
    await store.rollback(ws, cp.index)
    assert (ws.path / "tracked.log").read_text() == "force-added\n"


async def test_concurrent_checkpoints_get_distinct_numbers(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-many")
    stores = [CheckpointStore() for _ in range(4)]  # separate caches, like separate processes
    made = await asyncio.gather(*(stores[i % 4].create(ws) for i in range(12)))
    assert sorted(c.index for c in made) == list(range(12))


async def test_missing_checkpoint_and_non_git(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-miss")
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint 7"):
        await CheckpointStore().rollback(ws, 7)
    plain = tmp_path / "plain"
    plain.mkdir()
    not_git = await WorktreeManager(home).create(plain, "conv-plain", enabled=False)
    with pytest.raises(NotAGitWorkspaceError):
        await CheckpointStore().create(not_git)


async def test_works_without_any_git_identity(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("EMAIL", "")
    ws = await WorktreeManager(home).create(repo, "conv-anon")
    cp = await CheckpointStore().create(ws)
    assert "SynthOrg checkpoint" in git(repo, "log", "-1", "--format=%an", cp.sha)


# --- property: checkpoint -> arbitrary edits -> rollback gives back the same tree ---------

_NAMES = st.sampled_from(["a", "b", "c.txt", "d.log", "e.bin", "sub"])
_PATHS = st.lists(_NAMES, min_size=1, max_size=3).map("/".join)
_CONTENT = st.binary(max_size=64)
_TREES = st.dictionaries(_PATHS, _CONTENT, min_size=1, max_size=8)
_EDIT = st.one_of(
    st.tuples(st.just("write"), _PATHS, _CONTENT),
    st.tuples(st.just("delete"), st.integers(0, 50), st.just(b"")),
    st.tuples(st.just("rename"), st.integers(0, 50), st.just(b"")),
    st.tuples(st.just("chmod"), st.integers(0, 50), st.just(b"")),
)


def _consistent(files: dict[str, bytes]) -> dict[str, bytes]:
    """Drop paths that would need a file and a directory of the same name."""
    kept: dict[str, bytes] = {}
    for path in sorted(files, key=len):
        parts = path.split("/")
        prefixes = {"/".join(parts[:i]) for i in range(1, len(parts))}
        if prefixes & kept.keys() or any(k.startswith(path + "/") for k in kept):
            continue
        kept[path] = files[path]
    return kept


def _existing_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)


def _apply(root: Path, edit: tuple[str, object, bytes]) -> None:
    kind, target, content = edit
    files = _existing_files(root)
    if kind == "write":
        path = root / str(target)
        if any(parent.is_file() for parent in path.parents if root in parent.parents):
            return
        if path.is_dir():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return
    if not files:
        return
    chosen = files[int(str(target)) % len(files)]
    if kind == "delete":
        chosen.unlink()
    elif kind == "rename":
        dest = chosen.with_name(chosen.name + ".moved")
        if not dest.exists():
            os.rename(chosen, dest)
    else:
        chosen.chmod(chosen.stat().st_mode ^ 0o111)


async def _roundtrip(
    root: Path,
    initial: dict[str, bytes],
    before: list[tuple[str, object, bytes]],
    after: list[tuple[str, object, bytes]],
) -> None:
    repo = root / "proj"
    make_repo(repo, {".gitignore": b"*.log\n", **initial})
    ws = await WorktreeManager(root / "home").create(repo, "conv-prop")
    for edit in before:
        _apply(ws.path, edit)
    store = CheckpointStore()
    await store.create(ws)  # a first checkpoint so the persistent index is reused
    for edit in before[::2]:
        _apply(ws.path, edit)
    cp = await store.create(ws)
    expected = tree_state(ws.path)
    for edit in after:
        _apply(ws.path, edit)
    ignored = {p: (ws.path / p).read_bytes() for p in ignored_files(ws.path)}
    await store.rollback(ws, cp.index)
    assert tree_state(ws.path) == expected
    assert {p: (ws.path / p).read_bytes() for p in ignored_files(ws.path)} == ignored


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    initial=_TREES.map(_consistent),
    before=st.lists(_EDIT, max_size=6),
    after=st.lists(_EDIT, min_size=1, max_size=10),
)
def test_rollback_equality_property(
    initial: dict[str, bytes],
    before: list[tuple[str, object, bytes]],
    after: list[tuple[str, object, bytes]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_roundtrip(Path(tmp), initial, before, after))


async def test_same_second_same_size_edit_is_not_missed(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git's racy-clean rule must survive seeding the private index from the user's."""
    config = tmp_path / "gitconfig"
    config.write_text("[core]\n\ttrustctime = false\n\tcheckStat = minimal\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-racy")
    assert ws.git_dir is not None
    target = ws.path / "a.txt"
    original = target.stat()
    # The user's index was written in the same second as the checkout of a.txt ...
    os.utime(ws.git_dir / "index", ns=(original.st_atime_ns, original.st_mtime_ns))
    # ... and a.txt is then changed without its size or (whole-second) mtime changing.
    target.write_text("ALPHA\n")
    os.utime(target, ns=(original.st_atime_ns, original.st_mtime_ns))
    await asyncio.sleep(1.1)  # the first snapshot happens in a later second
    cp = await CheckpointStore().create(ws)
    assert git(repo, "show", f"{cp.tree}:a.txt") == "ALPHA\n"


async def test_a_lock_left_by_a_killed_git_does_not_wedge_checkpoints(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-lock")
    store = CheckpointStore()
    await store.create(ws)
    assert ws.git_dir is not None
    (ws.git_dir / "synthorg" / "snapshot.index.lock").write_bytes(b"")  # git was SIGKILLed
    (ws.path / "README.md").write_text("after the kill\n")
    cp = await store.create(ws)
    assert git(repo, "show", f"{cp.tree}:README.md") == "after the kill\n"
