"""A run's first checkpoint scans its tree as soon as the sandbox is up (service/loops.py
``_prepare``), while the model thinks: the checkpoint before the first action then adds only
what changed since, by its change journal (a whole scan of 100,000 files costs ~1 s).

Through a real governed run (bwrap, the worktree quota's overlay, the scripted model): the
whole scan runs in the early task, below the still-empty overlay, the first checkpoint
scans nothing whole, and what lands is what a scan of every file gives. At the workspace
level: a change made after the early scan is in the checkpoint.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from synthorg.domain import ActionEvent, CheckpointEvent, ObservationEvent
from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.workspace.refs import checkpoint_ref

from .test_landing_from_overlay import _git, _repo, _scratch_tree, _settings
from .test_redteam_more import attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


async def test_the_first_scan_runs_before_the_first_action_asks_for_it(
    tmp_path: Path, quotas: Path, scan_roots: list[tuple[str, Path, str]]
) -> None:
    repo = _repo(tmp_path)
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(
            c, repo, ["cd /workspace && echo x > x.txt && echo ok", "echo more > /workspace/y"]
        )
    sha = getattr(result, "commit_sha", None)
    assert sha, (out, result)
    in_run = [(root.name, task) for name, root, task in scan_roots if name != "snapshot.index"]
    # One whole scan of the run's view: the early one, below the overlay; none at the
    # checkpoints before either action.
    assert in_run == [("lower", "first-checkpoint-scan")], scan_roots
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    assert _git(worktree, "rev-parse", f"{sha}^{{tree}}").strip() == _scratch_tree(
        worktree, tmp_path
    )
    first, second = (checkpoint_ref(cid, n) for n in (0, 1))
    # The first checkpoint is the tree before any action; the second has the first's file.
    assert "x.txt" not in _git(worktree, "ls-tree", "--name-only", first).split()
    assert "x.txt" in _git(worktree, "ls-tree", "--name-only", second).split()


async def test_the_first_action_does_not_wait_for_the_whole_scan(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the overlay, while it has changed nothing, the checkpoint before the first action
    is the layer below it, which no write from the run reaches: the action starts at once and
    the checkpoint is written from the scan of that layer beside it (issue 31: the scan is
    ~1 s at 100,000 files). Here the scan is held until the first action's file exists: on a
    checkpoint that waited for the scan, that file never comes (it is written 30 s later,
    when the hold gives up). The checkpoint still holds the tree before the action, and it
    is logged before the action's observation, as a checkpoint taken first is."""
    from synthorg.workspace import snapshot

    real = snapshot.SnapshotIndex._add_everything_in
    held: list[bool] = []

    async def held_until_the_action_ran(
        self: snapshot.SnapshotIndex, root: Path, env: dict[str, str]
    ) -> str:
        task = asyncio.current_task()
        if task is not None and task.get_name() == "first-checkpoint-scan" and not held:
            deadline = asyncio.get_running_loop().time() + 30
            while not (self.ws.path / "x.txt").exists():
                if asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.02)
            held.append((self.ws.path / "x.txt").exists())
        return await real(self, root, env)

    monkeypatch.setattr(snapshot.SnapshotIndex, "_add_everything_in", held_until_the_action_ran)
    repo = _repo(tmp_path)
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(
            c, repo, ["cd /workspace && echo x > x.txt && echo ok", "echo more > /workspace/y"]
        )
        history = [s.event for s in await c.store.history(cid, limit=10_000)]
    assert held == [True], (held, out, result)
    assert getattr(result, "commit_sha", None), (out, result)
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    first, second = (checkpoint_ref(cid, n) for n in (0, 1))
    assert "x.txt" not in _git(worktree, "ls-tree", "--name-only", first).split()
    assert "x.txt" in _git(worktree, "ls-tree", "--name-only", second).split()
    assert _git(worktree, "rev-parse", f"{first}^{{tree}}") == _git(
        worktree, "rev-parse", f"{first}^1^{{tree}}"
    )  # the tree the run started from (its HEAD's): nothing of the action
    order = [
        (type(e).__name__, getattr(e, "action_id", None))
        for e in history
        if isinstance(e, (CheckpointEvent, ActionEvent, ObservationEvent))
    ]
    action = next(a for kind, a in order if kind == "ActionEvent")
    mine = [kind for kind, a in order if a == action]
    assert mine == ["ActionEvent", "CheckpointEvent", "ObservationEvent"], order


async def test_the_seed_is_translated_in_a_child_and_nothing_is_hashed_again(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big tree's seed translation (the user's index, of the host's view, rewritten for the
    idmapped one) runs in a child interpreter, not in this process, where ~150 ms of Python
    at 100,000 entries held the interpreter while the loop served the model's first call.
    It still works: the early scan of the fresh worktree has nothing to hash."""
    from synthorg.workspace import index_file, snapshot

    def not_here(*args: object, **kwargs: object) -> object:
        raise AssertionError("the seed was translated in the control plane's process")

    monkeypatch.setattr(index_file, "reowned", not_here)
    # A big tree's, as the test repository's is taken for (a small one's takes a thread).
    monkeypatch.setattr(snapshot, "_JOURNAL_MIN_ENTRIES", 4)
    real_pending = snapshot.pending
    listed: list[tuple[str, list[str]]] = []

    async def spy(*args: object, **kwargs: object) -> list[str]:
        out = await real_pending(*args, **kwargs)  # type: ignore[arg-type]
        task = asyncio.current_task()
        listed.append((task.get_name() if task else "", out))
        return out

    monkeypatch.setattr(snapshot, "pending", spy)
    repo = _repo(tmp_path)
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        _, out, result = await attack(c, repo, ["cd /workspace && echo x > x.txt && echo ok"])
    assert getattr(result, "commit_sha", None), (out, result)
    early = [files for task, files in listed if task == "first-checkpoint-scan"]
    assert early == [[]], listed  # translated: every file's stat data matches its entry


async def test_a_big_trees_journal_watches_the_dirs_find_listed_below_the_overlay(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big tree's early journal is placed on the directories a ``find`` of the layer under
    the overlay listed (not walked on the loop): writes in an existing subdirectory, one
    action after another, are in each next checkpoint, and the landing is the fresh tree."""
    from synthorg.workspace import snapshot

    monkeypatch.setattr(snapshot, "_JOURNAL_MIN_ENTRIES", 4)  # the test repository is big
    real = snapshot._directories
    found: list[list[str] | None] = []

    async def spy(root: Path) -> list[str] | None:
        found.append(await real(root))
        return found[-1]

    monkeypatch.setattr(snapshot, "_directories", spy)
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && echo edited >> pkg/a.py && echo ok",
        "cd /workspace && echo new > pkg/new.txt && echo ok",
        "cd /workspace && echo ok",
    ]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
    assert found and found[0] is not None and "pkg" in found[0], found
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    one, two = (checkpoint_ref(cid, n) for n in (1, 2))
    assert _git(worktree, "show", f"{one}:pkg/a.py").endswith("edited\n")
    assert "pkg/new.txt" in _git(worktree, "ls-tree", "-r", "--name-only", two).split()
    sha = getattr(result, "commit_sha", None)
    assert sha, (out, result)
    assert _git(worktree, "rev-parse", f"{sha}^{{tree}}").strip() == _scratch_tree(
        worktree, tmp_path
    )
