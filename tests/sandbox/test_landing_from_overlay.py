"""A landing reads what the run's overlay changed, not every file (issue 31), and commits
exactly what a scan of every file would have.

Through real governed runs (bwrap sandbox, the worktree quota's overlay, the scripted model):
the plan makes each kind of change overlayfs records (edits, top-level and directory
deletions, new and replaced directories, a mode change, a symlink, a rename, an ignored
file), and the landed tree is compared with one git builds from the final worktree from
scratch. On 806547a every landing scanned the whole host tree (``git add -A``), which is what
the spy below refuses.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.demo import create_demo_repo
from synthorg.service.loops import default_provisioner, default_registry
from tests.support import scripted_settings

from .test_redteam_more import MODEL, SCRIPT, attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd, capture_output=True, text=True, check=True,
        env={**os.environ, **(env or {})},
    ).stdout  # fmt: skip


def _repo(tmp_path: Path) -> Path:
    repo = create_demo_repo(tmp_path / "calc")
    files = {
        "top.txt": "top\n", "pkg/a.py": "a\n", "pkg/b.py": "b\n", "dir/sub/x": "x\n",
        "dir/y": "y\n", "old/f": "f\n", "swap/keep": "k\n", ".gitignore": "*.log\nbuild/\n",
        "build/out.txt": "built\n",
    }  # fmt: skip
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "tree")
    return repo


def _scratch_tree(worktree: Path, tmp_path: Path) -> str:
    """The worktree's tree as git writes it from a fresh index (every file read)."""
    env = {"GIT_INDEX_FILE": str(tmp_path / "scratch.index")}
    _git(worktree, "read-tree", "HEAD^", env=env)  # tracked-though-ignored stay tracked
    _git(worktree, "add", "-A", env=env)
    return _git(worktree, "write-tree", env=env).strip()


def _settings(tmp_path: Path) -> Any:
    return scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, sandbox={"limits": {"disk_bytes": 16 << 20}}
    )


async def test_the_landing_reads_only_what_the_overlay_changed_and_lands_it_all(
    tmp_path: Path, quotas: Path, full_scans: list[str]
) -> None:
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && echo edited >> pkg/a.py && rm top.txt && rm -rf dir && echo ok",
        "cd /workspace && mkdir -p new/deep && echo n > new/deep/n && chmod +x pkg/b.py"
        " && ln -s pkg/a.py lnk && echo noise > run.log && echo ok",
        # an opaque dir (swap/ replaced whole) and a rename (a delete plus a create)
        "cd /workspace && rm -rf swap && mkdir swap && echo s > swap/s && mv old/f moved"
        " && echo ok",
    ]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
    assert [o.startswith("ok") for o in out] == [True] * 3, out
    sha = getattr(result, "commit_sha", None)
    assert sha, result
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    landed = _git(worktree, "rev-parse", f"{sha}^{{tree}}").strip()
    assert landed == _scratch_tree(worktree, tmp_path)
    files = set(_git(worktree, "ls-tree", "-r", "--name-only", sha).split())
    assert {"pkg/a.py", "pkg/b.py", "new/deep/n", "lnk", "swap/s", "moved"} <= files
    assert not files & {"top.txt", "dir/y", "dir/sub/x", "swap/keep", "old/f", "run.log"}
    assert "100755" in _git(worktree, "ls-tree", sha, "pkg/b.py")
    assert _git(worktree, "status", "--porcelain") == ""  # the index follows the commit
    # The run's checkpoints scanned its view whole; the landing scanned no whole tree...
    assert full_scans and all(name != "snapshot.index" for name in full_scans), full_scans
    # ...and its index held only the changed paths, never a copy of every entry.
    git_dir = Path(_git(worktree, "rev-parse", "--absolute-git-dir").strip())
    alone = git_dir / "synthorg" / "snapshot-landing.index"
    held = set(_git(worktree, "ls-files", env={"GIT_INDEX_FILE": str(alone)}).split())
    assert held == {"pkg/a.py", "pkg/b.py", "new/deep/n", "lnk", "swap/s", "moved"}, held


async def test_a_changed_ignore_file_makes_the_landing_scan_everything(
    tmp_path: Path, quotas: Path, full_scans: list[str]
) -> None:
    """A rewritten .gitignore can un-ignore files the run never touched: only a scan of
    every file finds them, so the landing does one (and lands what it finds)."""
    repo = _repo(tmp_path)
    plan = ["cd /workspace && printf 'build/\\n' > .gitignore && echo x > run.log && echo ok"]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
    sha = getattr(result, "commit_sha", None)
    assert sha, (out, result)
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    assert _git(worktree, "rev-parse", f"{sha}^{{tree}}").strip() == _scratch_tree(
        worktree, tmp_path
    )
    assert "run.log" in _git(worktree, "ls-tree", "-r", "--name-only", sha).split()
    assert "snapshot.index" in full_scans


async def test_the_first_checkpoint_reads_the_tree_below_the_unchanged_overlay(
    tmp_path: Path, quotas: Path, scan_roots: list[tuple[str, Path, str]]
) -> None:
    """Before any action the overlay has changed nothing, so the run's first whole scan reads
    the idmapped tree under it: every file scanned through the overlay is an overlay inode
    its unmount must free (224 ms at 100,000 files on 806547a, 4 ms after)."""
    repo = _repo(tmp_path)
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, ["cd /workspace && echo x > x.txt && echo ok"])
    assert getattr(result, "commit_sha", None), (out, result)
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    in_run = [root for name, root, _ in scan_roots if name != "snapshot.index"]
    assert in_run and in_run[0] != worktree, scan_roots  # read below the overlay
    assert in_run[0].name == "lower", scan_roots
