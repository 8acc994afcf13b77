"""A run's first checkpoint scans its tree as soon as the sandbox is up (service/loops.py
``_prepare``), while the model thinks: the checkpoint before the first action then adds only
what changed since, by its change journal (a whole scan of 100,000 files costs ~1 s).

Through a real governed run (bwrap, the worktree quota's overlay, the scripted model): the
whole scan runs in the early task, below the still-empty overlay, the first checkpoint
scans nothing whole, and what lands is what a scan of every file gives. At the workspace
level: a change made after the early scan is in the checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
