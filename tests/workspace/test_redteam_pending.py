"""Red team: ``hostlimits.pending`` judged by stat data (2b0ec92, 450dfb7).

``pending`` lists what ``git add -A`` would hash so that sizes and counts are checked before
git hashes anything. It now reads a copy of the index dated far in the future (no entry is
racily clean there) and asks ``diff-files`` (at first ``--ignore-submodules=all``; now
``=dirty``, the first finding's fix). ``git add`` itself still
reads the real index. Whatever ``add`` would hash and ``pending`` leaves out escapes the size
bound. Tests that CROSS assert the correct behaviour (they fail on 450dfb7).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from synthorg.sandbox.protocol import SandboxLimits
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.hostlimits import HostLimits, pending
from synthorg.workspace.snapshot import open_git
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo
from .test_pending_by_stat import FILES, _racy_worktree

WRAP = 2**32  # the index stores st_size truncated to 32 bits
GITLINK = "1111111111111111111111111111111111111111"


# --- CROSSED (regression of 450dfb7): a gitlink replaced by a regular file -------------------


async def _worktree_with_gitlink(tmp_path: Path, home: Path):  # type: ignore[no-untyped-def]
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{GITLINK},sub")
    git(repo, "commit", "-q", "-m", "a submodule (gitlink)")
    return await WorktreeManager(home).create(repo, "conv-gitlink")


async def test_gitlink_replaced_by_a_huge_sparse_file_is_listed(tmp_path: Path, home: Path) -> None:
    """``diff-files --ignore-submodules=all`` zeroes ``changed`` for every gitlink entry,
    TYPE_CHANGED included: a gitlink whose path is now a regular file is not listed, yet
    ``git add -A`` (no such option) replaces the gitlink with the file and hashes it whole.
    ``ls-files --modified`` (6bfc7ff) listed it. The agent gets a gitlink into the index by
    making an embedded repository (a checkpoint adds it as one) or the project has one."""
    ws = await _worktree_with_gitlink(tmp_path, home)
    sub = ws.path / "sub"
    if sub.is_dir():
        sub.rmdir()
    with sub.open("wb") as f:  # sparse: costs the agent's quota nothing
        f.truncate(1 << 20)
    checkout = await open_git(ws)
    assert "sub" in await pending(checkout, {})


async def test_gitlink_swap_lands_an_oversize_file_in_a_checkpoint(
    tmp_path: Path, home: Path
) -> None:
    """The consequence: the checkpoint hashes the file the bound should have kept out."""
    ws = await _worktree_with_gitlink(tmp_path, home)
    sub = ws.path / "sub"
    if sub.is_dir():
        sub.rmdir()
    with sub.open("wb") as f:
        f.truncate(1 << 20)
    limits = HostLimits(max_file_bytes=1024)
    checkpoint = await CheckpointStore(limits=limits).create(ws)
    listed = git(ws.path, "ls-tree", "-l", checkpoint.sha, "sub").split()
    # Correct: never hashed (left out, or the gitlink kept); found: a 1 MiB blob.
    assert not (listed and listed[1] == "blob" and int(listed[3]) > limits.max_file_bytes), listed


# --- CROSSED in-process, closed by configuration: a size wrapped by 2**32 ------------------
# A racily clean entry grown by 2**32 bytes (sparse) with its mtime put back matches its
# entry by stat data (git keeps sizes modulo 2**32), so the stat-judged listing leaves it out
# and ``git add`` hashes 4 GiB unmeasured. (The listing by content, 6bfc7ff, hashed those 4 GiB
# itself to list the file.) The agent cannot make such a file: a sandbox's largest file
# (RLIMIT_FSIZE, ``[sandbox.limits] file_bytes``) is refused at 4 GiB or more, and a real run's
# attempt fails (tests/sandbox/test_redteam_early_checkpoint.py).


def test_a_sandbox_may_not_allow_files_of_4_gib() -> None:
    with pytest.raises(ValidationError, match="less than 4294967296"):
        SandboxLimits(file_bytes=WRAP)
    assert SandboxLimits(file_bytes=WRAP - 1).file_bytes == WRAP - 1


# --- HELD ----------------------------------------------------------------------------------


async def test_split_index_copy_is_read_with_its_shared_half(tmp_path: Path, home: Path) -> None:
    """A split index's copy names its shared index by sha, in the same directory: found."""
    repo = tmp_path / "proj"
    make_repo(repo, dict(FILES))
    ws = await WorktreeManager(home).create(repo, "conv-split")
    git(ws.path, "-c", "core.splitIndex=true", "update-index", "--split-index")
    assert ws.git_dir is not None
    assert list(ws.git_dir.glob("sharedindex.*")) or list(
        Path(git(ws.path, "rev-parse", "--git-common-dir").strip()).glob("sharedindex.*")
    )
    (ws.path / "d0/f1.txt").write_text("a longer line than before\n")
    (ws.path / "new.txt").write_text("n\n")
    checkout = await open_git(ws)
    assert await pending(checkout, {}) == ["d0/f1.txt", "new.txt"]
    assert not list(ws.git_dir.glob("*.stat"))


async def test_directory_specs_list_what_add_would_hash(tmp_path: Path, home: Path) -> None:
    """``_add_paths`` hands directories to ``pending``: stat-changed and untracked inside
    them are listed; nothing outside."""
    ws = await _racy_worktree(tmp_path, home)
    (ws.path / "d0/f1.txt").write_text("a longer line than before\n")
    (ws.path / "d0/new.txt").write_text("n\n")
    (ws.path / "d1/f12.txt").write_text("outside the spec, longer\n")
    checkout = await open_git(ws)
    assert await pending(checkout, {}, ["d0"]) == ["d0/f1.txt", "d0/new.txt"]


async def test_missing_index_lists_everything(tmp_path: Path, home: Path) -> None:
    ws = await _racy_worktree(tmp_path, home)
    assert ws.git_dir is not None
    checkout = await open_git(ws)
    missing = ws.git_dir / "nope.index"
    listed = await pending(checkout, {"GIT_INDEX_FILE": str(missing)})
    assert listed == sorted(FILES)
    assert not missing.exists()


# --- Change 2: cancelling the early scan (CheckpointStore.prepare) ---------------------------


def _gits_in(root: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd == str(root) or str(root) in cmd:
            found.append(f"{entry.name}: {cmd}")
    return found


@pytest.mark.parametrize("after_s", [0.02, 0.1, 0.3])
async def test_cancelled_prepare_leaves_no_git_or_lock_and_the_next_checkpoint_is_whole(
    tmp_path: Path, home: Path, after_s: float
) -> None:
    """No git is left running and no index.lock / stat copy is left (HOLDS), but the next
    checkpoint CROSSES: prepare() started the journal (``_start_journal``) and wrote the
    head marker (``_seed``) before the whole scan it was cancelled in, so the next
    ``add_all`` finds a live journal and a seeded index, scans nothing whole, and the
    checkpoint holds only the seed (here: 1 of 1501 files). Reached when the loop ends
    (or the run is cancelled) before the early scan finishes and the journal outlives it
    (no overlay: the journal's root identity does not change), then a resumed run."""
    import asyncio

    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    ws = await WorktreeManager(home).create(repo, "conv-cancel")
    assert ws.git_dir is not None
    blob = os.urandom(64 * 1024)
    for i in range(1500):  # ~100 MB to hash: the scan takes a while
        (ws.path / f"u{i // 100}").mkdir(exist_ok=True)
        (ws.path / f"u{i // 100}" / f"f{i}.bin").write_bytes(blob + str(i).encode())
    store = CheckpointStore()
    task = asyncio.create_task(store.prepare(ws))
    await asyncio.sleep(after_s)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(40):
        if not _gits_in(ws.path):
            break
        await asyncio.sleep(0.05)
    assert _gits_in(ws.path) == []
    state = ws.git_dir / "synthorg"
    found = [*state.glob("*.lock"), *state.glob("*.stat")]
    found += [*ws.git_dir.glob("*.stat"), *ws.git_dir.glob("index.lock")]
    left = sorted(p.name for p in found)
    assert left in ([], ["snapshot.lock"]), left
    checkpoint = await asyncio.wait_for(store.create(ws), timeout=60)
    listed = git(ws.path, "ls-tree", "-r", "--name-only", checkpoint.sha).split()
    assert len(listed) == 1501


async def test_a_failed_early_scan_does_not_make_the_first_checkpoint_skip_files(
    tmp_path: Path, home: Path
) -> None:
    """CROSSES (regression of 450dfb7): ``_settled`` swallows the early scan's failure
    ("the checkpoint scans for itself and meets the same error"), but the failed scan had
    already started the journal and seeded the index, so the checkpoint scans nothing
    whole: no error, and checkpoint 0 lacks every untracked file (a rollback to it deletes
    them). Here the failure is the count bound (TooManyFilesError); any mid-scan failure
    (host-work CPU limit, a git error) does the same. Before: checkpoint 0 raised."""
    from synthorg.domain import CheckpointEvent
    from synthorg.service.checkpointing import checkpoint_hook, early_scan
    from synthorg.workspace.errors import TooManyFilesError

    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    ws = await WorktreeManager(home).create(repo, "conv-failscan")
    for i in range(30):
        (ws.path / f"u{i}.txt").write_text(f"{i}\n")
    store = CheckpointStore(limits=HostLimits(max_changed_files=20))
    async with early_scan(store, ws) as early:
        hook = checkpoint_hook(store, ws, early)
        assert hook is not None
        try:
            event = await hook("call-1")
        except TooManyFilesError:
            return  # correct: the bound refuses, as the checkpoint did without the early scan
    assert isinstance(event, CheckpointEvent)
    listed = git(ws.path, "ls-tree", "-r", "--name-only", event.ref).split()
    assert len(listed) == 31, listed
