"""Worktree lifecycle on real repositories: create, reattach, remove, fallbacks, concurrency."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

from synthorg.errors import ConflictError, NotFoundError, UsageError
from synthorg.workspace.errors import UnsuitableRepositoryError, WorkspaceTamperedError
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo, tree_state, worktree_count

FILES = {"README.md": b"hello\n", "src/app.py": b"print('hi')\n"}


async def test_lifecycle_create_reattach_remove(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    base = make_repo(repo, FILES)
    manager = WorktreeManager(home)

    ws = await manager.create(repo, "conv-1")
    assert ws.is_worktree
    assert ws.path == home / "worktrees" / "conv-1" / "proj"
    assert ws.branch == "synthorg/conv-1"
    assert ws.base_ref == base
    assert ws.base_ref_name == "main"
    assert ws.repo == repo
    assert tree_state(ws.path) == {k: (v, False) for k, v in FILES.items()}
    assert git(ws.path, "symbolic-ref", "HEAD").strip() == "refs/heads/synthorg/conv-1"
    assert git(ws.path, "status", "--porcelain") == ""
    # The source checkout is untouched: still on main, clean.
    assert git(repo, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert git(repo, "status", "--porcelain") == ""

    # Resume: the same worktree is reused, work in it survives.
    (ws.path / "wip.txt").write_text("work in progress\n")
    again = await manager.create(repo, "conv-1")
    assert again.path == ws.path
    assert again.base_ref == base
    assert "reattached" in again.note
    assert (again.path / "wip.txt").read_text() == "work in progress\n"
    got = await manager.get("conv-1")
    assert got is not None and got.path == ws.path and got.branch == ws.branch

    # A commit on the branch, then removal: directory gone, branch kept.
    git(ws.path, "add", "wip.txt")
    git(ws.path, "commit", "-q", "-m", "wip")
    tip = git(ws.path, "rev-parse", "HEAD").strip()
    await manager.remove(ws)
    assert not ws.path.exists()
    assert not (home / "worktrees" / "conv-1").exists()
    assert git(repo, "rev-parse", "refs/heads/synthorg/conv-1").strip() == tip
    assert await manager.get("conv-1") is None
    assert worktree_count(repo) == 1

    # Recreated later on the kept branch, with the original base remembered.
    git(repo, "commit", "-q", "--allow-empty", "-m", "main moved on")
    back = await manager.create(repo, "conv-1")
    assert back.base_ref == base
    assert (back.path / "wip.txt").exists()
    assert git(back.path, "rev-parse", "HEAD").strip() == tip

    await manager.remove(back, delete_branch=True)
    assert git(repo, "branch", "--list", "synthorg/*") == ""
    assert git(repo, "for-each-ref", "refs/synthorg") == ""


async def test_explicit_base_ref(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    first = make_repo(repo, FILES)
    git(repo, "tag", "v1")
    (repo / "later.txt").write_text("later\n")
    git(repo, "add", "later.txt")
    git(repo, "commit", "-q", "-m", "later")
    manager = WorktreeManager(home)

    ws = await manager.create(repo, "conv-tag", base_ref="v1")
    assert ws.base_ref == first and ws.base_ref_name == "v1"
    assert not (ws.path / "later.txt").exists()

    with pytest.raises(UsageError, match="does not name a commit"):
        await manager.create(repo, "conv-bad", base_ref="no-such-branch")
    assert not (home / "worktrees" / "conv-bad").exists()


async def test_detached_head_base(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    sha = make_repo(repo, FILES)
    git(repo, "checkout", "-q", "--detach")
    ws = await WorktreeManager(home).create(repo, "conv-d")
    assert ws.base_ref == sha and ws.base_ref_name == "HEAD"


async def test_non_git_directory_is_refused_unless_in_place_is_asked(
    tmp_path: Path, home: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("x")
    manager = WorktreeManager(home)
    with pytest.raises(UnsuitableRepositoryError, match="not a git repository") as caught:
        await manager.create(plain, "conv-plain")
    assert "\n" not in str(caught.value) and "--no-worktree" in str(caught.value)
    ws = await manager.create(plain, "conv-plain", enabled=False)
    assert not ws.is_worktree and not ws.is_git
    assert ws.path == plain and ws.repo is None and ws.branch is None
    assert "WARNING" in ws.note and "in place" in ws.note
    await manager.remove(ws, delete_branch=True)
    assert (plain / "notes.txt").read_text() == "x"  # never deletes the user's directory


async def test_in_place_git_repository_gets_no_host_git(tmp_path: Path, home: Path) -> None:
    """In place, the agent can write .git itself: the host never runs git there."""
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    manager = WorktreeManager(home)
    ws = await manager.create(repo, "conv-off", enabled=False)
    assert not ws.is_worktree and not ws.is_git and ws.git_dir is None
    assert ws.path == repo and "WARNING" in ws.note
    assert not (home / "worktrees").exists()
    assert "synthorg/conv-off" not in git(repo, "branch", "--list")
    await manager.remove(ws)
    assert (repo / "README.md").exists()


async def test_bare_and_empty_repositories_are_refused(tmp_path: Path, home: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    manager = WorktreeManager(home)
    with pytest.raises(UnsuitableRepositoryError, match="bare repository"):
        await manager.create(bare, "conv-bare")

    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    with pytest.raises(UnsuitableRepositoryError, match="no commits"):
        await manager.create(empty, "conv-empty")
    # Nothing was left behind: no worktree dir, no branch.
    assert not (home / "worktrees" / "conv-empty").exists()
    assert git(empty, "for-each-ref") == ""
    assert (await manager.create(empty, "conv-empty", enabled=False)).path == empty


async def test_data_dir_and_its_relatives_are_refused(tmp_path: Path, home: Path) -> None:
    manager = WorktreeManager(home)
    home.mkdir(parents=True)
    inside = home / "worktrees" / "other"
    make_repo(inside, FILES)
    for path, in_place in ((home, True), (inside, True), (inside, False), (tmp_path, True)):
        with pytest.raises(UsageError, match="data dir"):
            await manager.create(path, "conv-h", enabled=not in_place)
    # A repository SynthOrg keeps in its data dir (the demo's) is a fine worktree source.
    demo = home / "demo" / "repo"
    make_repo(demo, FILES)
    assert (await manager.create(demo, "conv-demo")).is_worktree
    with pytest.raises(UsageError, match="data dir"):
        await manager.create(demo, "conv-demo2", enabled=False)


async def test_bad_inputs(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    manager = WorktreeManager(home)
    for bad in ("../escape", "a..b", "x.lock", "", "with space", "a/b"):
        with pytest.raises(UsageError):
            await manager.create(repo, bad)
    with pytest.raises(NotFoundError):
        await manager.create(tmp_path / "missing", "conv-x")
    squatter = home / "worktrees" / "conv-sq" / "proj"
    squatter.mkdir(parents=True)
    (squatter / "something").write_text("not a worktree")
    with pytest.raises(ConflictError, match="has no record of it"):
        await manager.create(repo, "conv-sq")


async def test_worktree_deleted_by_hand_is_recreated(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    manager = WorktreeManager(home)
    ws = await manager.create(repo, "conv-rm")
    shutil.rmtree(ws.path)
    again = await manager.create(repo, "conv-rm")
    assert again.path == ws.path and (again.path / "README.md").exists()
    assert "existing branch" in again.note


@pytest.mark.stress
async def test_32_concurrent_creations_from_one_repo(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    files = {f"pkg{i % 7}/mod{i}.py": f"value = {i}\n".encode() for i in range(300)}
    base = make_repo(repo, files)
    manager = WorktreeManager(home)
    ids = [f"conv-{i:02d}" for i in range(32)]

    spaces = await asyncio.gather(*(manager.create(repo, cid) for cid in ids))

    assert len({ws.path for ws in spaces}) == 32
    expected = {k: (v, False) for k, v in files.items()}
    for cid, ws in zip(ids, spaces, strict=True):
        assert ws.branch == f"synthorg/{cid}" and ws.base_ref == base
        assert tree_state(ws.path) == expected
        assert git(ws.path, "status", "--porcelain") == ""
        assert git(ws.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == ws.branch
    assert worktree_count(repo) == 33
    git(repo, "fsck", "--no-progress", "--strict")

    await asyncio.gather(*(manager.remove(ws, delete_branch=True) for ws in spaces))
    assert worktree_count(repo) == 1
    assert git(repo, "branch", "--list", "synthorg/*") == ""


@pytest.mark.stress
async def test_concurrent_creations_across_processes(tmp_path: Path, home: Path) -> None:
    """The file lock, not only the asyncio lock, keeps separate processes from colliding."""
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from synthorg.workspace.worktrees import WorktreeManager\n"
        "async def main():\n"
        "    m = WorktreeManager(Path(sys.argv[1]))\n"
        "    await asyncio.gather(*(m.create(Path(sys.argv[2]), f'{sys.argv[3]}-{i}')"
        " for i in range(6)))\n"
        "asyncio.run(main())\n"
    )
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            str(home),
            str(repo),
            f"p{n}",
            stderr=asyncio.subprocess.PIPE,
        )
        for n in range(3)
    ]
    for proc in procs:
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
    assert worktree_count(repo) == 1 + 18
    git(repo, "fsck", "--no-progress")


async def test_creation_is_all_or_nothing(tmp_path: Path, home: Path) -> None:
    """A failure after the branch and worktree were made (here: the record cannot be
    written) leaves no branch, no base ref, no registered worktree and no files."""
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    manager = WorktreeManager(home)
    blocker = home / "worktrees" / "conv-fail" / ".proj.workspace.json.tmp"
    blocker.mkdir(parents=True)  # the record's temp file cannot be created
    with pytest.raises(OSError):
        await manager.create(repo, "conv-fail")
    assert "synthorg/conv-fail" not in git(repo, "branch", "--list")
    assert git(repo, "for-each-ref", "refs/synthorg/") == ""
    assert worktree_count(repo) == 1
    assert not (home / "worktrees" / "conv-fail" / "proj").exists()
    assert await manager.get("conv-fail") is None
    blocker.rmdir()
    ws = await manager.create(repo, "conv-fail")  # and a retry succeeds
    assert ws.is_worktree and (ws.path / "README.md").exists()


async def test_resume_rechecks_what_the_store_and_the_host_record_say(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    other = tmp_path / "other"
    other.mkdir()
    manager = WorktreeManager(home)
    ws = await manager.create(repo, "conv-r")
    assert (await manager.resume(repo, "conv-r", ws.info())).path == ws.path
    moved = ws.info().model_copy(update={"path": str(home)})
    with pytest.raises(WorkspaceTamperedError, match="refusing to mount"):
        await manager.resume(repo, "conv-r", moved)
    # In place: the directory must be the task's repository, and never the data dir.
    in_place = await manager.create(other, "conv-p", enabled=False)
    assert (await manager.resume(other, "conv-p", in_place.info())).path == other
    elsewhere = in_place.info().model_copy(update={"path": str(home)})
    with pytest.raises(WorkspaceTamperedError, match="refusing to mount"):
        await manager.resume(other, "conv-p", elsewhere)
    # A host record that names another path is refused, not followed.
    record = home / "worktrees" / "conv-r" / ".proj.workspace.json"
    record.write_text(record.read_text().replace(str(ws.path), str(other)))
    with pytest.raises(WorkspaceTamperedError, match="does not describe"):
        await manager.resume(repo, "conv-r", ws.info())


async def test_a_worktree_without_a_host_record_is_adopted_only_if_untampered(
    tmp_path: Path, home: Path
) -> None:
    """Worktrees made before records lived beside them: found through git's admin dirs."""
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    manager = WorktreeManager(home)
    ws = await manager.create(repo, "conv-legacy")
    record = home / "worktrees" / "conv-legacy" / ".proj.workspace.json"
    record.unlink()
    adopted = await manager.create(repo, "conv-legacy")
    assert (adopted.path, adopted.git_dir, adopted.base_ref) == (ws.path, ws.git_dir, ws.base_ref)
    assert record.is_file()
    record.unlink()
    (ws.path / ".git").write_text("gitdir: .evil\n")
    with pytest.raises(WorkspaceTamperedError, match=r"\.git file changed"):
        await manager.create(repo, "conv-legacy")
    assert not record.exists()
