"""Settling the quotas of processes that died: a host killed mid-run leaves its image
mounted over the worktree; the next backend of the same data dir (or a takeover of that
run) copies it back and releases it (quota.py's ``release``, under the dead owner's lock).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.processes import pid_alive
from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.hostlock import lock_dir
from synthorg.sandbox.quota import TRASH, WorkspaceQuota, quota_root

log = get_logger(__name__)


def _claim_stale(entry: Path) -> tuple[int, Path, bool] | None:
    """Lock a dead owner's quota for release: (lock fd, worktree, layered), or None to leave
    it be."""
    try:
        fd = lock_dir(entry, blocking=False)
        if fd is None:
            # Held: by a live owner (leave it), or by another sweeper (wait until it is done,
            # so this process never mounts over a tree that is still being copied back).
            pid = int(json.loads((entry / "record.json").read_text())["pid"])
            if pid_alive(pid):
                return None
            fd = lock_dir(entry, blocking=True)
        assert fd is not None
    except (OSError, ValueError, KeyError):
        return None
    try:  # read under the lock: a sweeper that went first deleted it
        record = json.loads((entry / "record.json").read_text())
        worktree, layered = Path(record["worktree"]), bool(record.get("layered", False))
    except (OSError, ValueError, KeyError, TypeError):
        os.close(fd)
        return None
    return fd, worktree, layered


def settle(entry: Path) -> bool:
    """Release one quota dir whose owning process died: its image copied back onto its
    worktree, unmounted and deleted. False when its owner lives, it is no quota (any more),
    or the release failed (kept for a later sweep). A takeover may call it for the run it
    inherits; ``sweep_stale`` calls it for every entry of one data dir's root."""
    claimed = _claim_stale(entry)
    if claimed is None:
        return False
    quota = WorkspaceQuota(entry, claimed[1])
    quota._lock_fd, quota.layered = claimed[0], claimed[2]
    try:
        quota.release()
    except SandboxStartError as exc:
        log.warning("sandbox.quota_sweep_failed", dir=str(entry), error=str(exc))
        return False
    return True


def stale_over(worktree: Path, root: Path | None = None) -> list[Path]:
    """The quota dirs, of any data dir under the host-wide root, whose record names
    ``worktree``: for a process taking a run over from a dead owner of another data dir,
    which then ``settle``s them (its run's worktree is its own now). Nothing is claimed."""
    target = worktree.resolve()
    found = []
    for record in (root or quota_root()).glob("owner-*/*/record.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            if Path(json.loads(record.read_text())["worktree"]).resolve() == target:
                found.append(record.parent)
    return sorted(found)


def sweep_stale(root: Path | None = None) -> int:
    """Release the quotas in root (one data dir's, see ``owner_root``) whose owning process
    died (a host killed mid-run); returns how many."""
    base = root or quota_root()
    released = 0
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            if entry.name.startswith(TRASH):  # released; its deleter exited first
                shutil.rmtree(entry, ignore_errors=True)
            elif settle(entry):
                released += 1
    return released
