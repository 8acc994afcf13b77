"""A disk quota per sandbox: the worktree lives on a size-limited loop filesystem for the run.

Why a loop-mounted ext4 image: on a stock host (ext4 root without the ``quota``/``project``
features, no XFS) it is the only per-sandbox quota that gives a process inside a plain
ENOSPC; a tmpfs would cost RAM and a watchdog cannot refuse a write. It also gives the
worktree its own superblock, so /proc/self/mountinfo inside shows ``/ /workspace ...
/dev/loopN``, not the host path (which names the conversation).

At start (host root): a sparse image sized to the worktree's usage plus the allowance is
made with ``mkfs.ext4 -d <worktree>`` (which copies the tree in), mounted at a private
directory, and bind-mounted over the worktree path, so host-side code (checkpoints, views)
sees what the sandbox writes. At release: the bind is removed, the tree is copied back
onto the real worktree with ``rsync -a --delete``, the image unmounted and deleted. Every
mount is recorded in a host-only file; a host that died mid-run leaves a record that the
next backend start releases the same way.

Every quota dir has a lock (``flock``) held by its owner for the quota's whole life and by
whoever releases it. After a kill, every CLI process that boots sweeps, so several may reach
the same dead owner's quota at once; without the lock one copied back from a mount point
another had just unmounted (an empty directory, with ``--delete``) and wiped the worktree.
The kernel drops a dead owner's lock, so the lock is also the liveness test.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import threading
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.hostlock import lock_dir

log = get_logger(__name__)

#: Host-only dir for images and records (disk-backed; /tmp may be RAM).
ROOT_ENV = "SYNTHORG_SANDBOX_QUOTA_DIR"
DEFAULT_ROOT = Path("/var/tmp/synthorg-quota")
_SLACK = 4 * 1024**2  # ext4's own metadata on a small image
_OVERHEAD = 1.10  # inode tables and directories on top of the tree's data
_MIN_IMAGE = 8 * 1024**2
_TIMEOUT_S = 300.0


def quota_root() -> Path:
    """Where images and records live on this host."""
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def unavailable_reason() -> str | None:
    """Why per-sandbox quotas cannot work here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (loop mounts); the sandbox runs without a worktree quota"
    for tool, package in (("mkfs.ext4", "e2fsprogs"), ("rsync", "rsync"), ("mount", "mount")):
        if shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            return f"{tool} is missing (`apt-get install -y {package}`)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control) on this host"
    return None


def _run(*argv: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxStartError(f"{argv[0]} failed: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-500:]
        raise SandboxStartError(f"{' '.join(argv[:2])} failed ({done.returncode}): {detail}")


def _usage(root: Path) -> int:
    """Bytes the tree occupies on disk (never following symlinks)."""
    total = 0
    for _, dirs, files, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                total += os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_blocks * 512
    return total


class WorkspaceQuota:
    """One run's size-limited filesystem over its worktree; ``release`` puts the tree back."""

    def __init__(self, dir: Path, worktree: Path) -> None:
        self.dir = dir
        self.worktree = worktree
        self.image = dir / "fs.img"
        self.mnt = dir / "mnt"
        self.size = 0
        self._lock_fd: int | None = None
        self.users = 1  # sandboxes of this process sharing it (see mount)

    @classmethod
    def mount(cls, worktree: Path, allowance: int, root: Path | None = None) -> WorkspaceQuota:
        """The quota over worktree: a new image of its size plus allowance, mounted over it.

        Sandboxes of one process on the same worktree share one quota (the first one's
        allowance), released by the last: a second image stacked over the first would be
        unmounted out of order and leak mounts.
        """
        key = worktree.resolve()
        with _path_lock(key):
            held = _HELD.get(key)
            if held is not None:
                held.users += 1
                return held
            quota = cls._mount_new(key, allowance, root)
            _HELD[key] = quota
            return quota

    @classmethod
    def _mount_new(cls, worktree: Path, allowance: int, root: Path | None) -> WorkspaceQuota:
        base = root or quota_root()
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        quota = cls(base / secrets.token_hex(8), worktree)  # resolved by mount
        quota.dir.mkdir(mode=0o700)
        quota._lock_fd = lock_dir(quota.dir, blocking=True)  # ours until release
        quota._record()
        try:
            quota._make(allowance)
        except BaseException:
            quota.release()
            raise
        return quota

    def _record(self) -> None:
        record = {"worktree": str(self.worktree), "pid": os.getpid()}
        (self.dir / "record.json").write_text(json.dumps(record))

    def _make(self, allowance: int) -> None:
        self.size = max(int(_usage(self.worktree) * _OVERHEAD) + allowance + _SLACK, _MIN_IMAGE)
        with open(self.image, "wb") as fh:
            fh.truncate(self.size)  # sparse: the host disk holds only what is written
        st = os.stat(self.worktree)
        _run(
            "mkfs.ext4", "-q", "-F", "-m", "0", "-i", "8192", "-O", "^has_journal",
            "-E", f"nodiscard,root_owner={st.st_uid}:{st.st_gid}",
            "-d", str(self.worktree), str(self.image),
        )  # fmt: skip
        self.mnt.mkdir(mode=0o700)
        _run("mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.mnt))
        os.chmod(self.mnt, st.st_mode & 0o7777)
        if not (self.worktree / "lost+found").exists():  # mkfs's, not the tree's
            (self.mnt / "lost+found").rmdir()
        _run("mount", "--bind", str(self.mnt), str(self.worktree))

    def release(self) -> None:
        """Unbind, copy the tree back onto the worktree, unmount and delete the image.

        Idempotent; a failure to copy back keeps the image and its record for the next sweep.
        The caller holds this quota's lock (its owner, or a sweeper).
        """
        with _path_lock(self.worktree):
            self.users -= 1
            if self.users > 0:
                return  # another sandbox of this process still works on it
            if _HELD.get(self.worktree) is self:
                del _HELD[self.worktree]
        try:
            self._release()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _release(self) -> None:
        if self.worktree.is_mount():
            if _mounted_from(self.worktree, self.mnt):
                _run("umount", str(self.worktree))
            elif self.mnt.is_mount():
                # Another run's quota covers ours (a successor took the run over while this
                # process was stopped), so our image is stale: copying it back would overwrite
                # the live tree, unmounting would remove theirs. Keep ours and its record;
                # when theirs is released its copy-back lands in our image, which a later
                # sweep puts back.
                raise SandboxStartError(
                    f"quota {self.dir} is covered by another quota on {self.worktree}; "
                    "left for a later sweep"
                )
        if not self.mnt.is_mount() and self.image.exists() and self.mnt.exists():
            _run("mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.mnt))
        if self.mnt.is_mount():
            if self.worktree.is_dir():  # a worktree deleted meanwhile gets nothing back
                # --checksum: compare content, never size+mtime, which the sandbox sets (a
                # same-size fix in the second the worktree was made was skipped: NO_OP).
                _run("rsync", "-a", "--checksum", "--delete", "--chmod=ug-s",
                     f"{self.mnt}/", f"{self.worktree}/")  # fmt: skip
            _run("umount", str(self.mnt))
        shutil.rmtree(self.dir, ignore_errors=True)


_HELD: dict[Path, WorkspaceQuota] = {}
_PATH_LOCKS: dict[Path, threading.RLock] = {}
_PATH_LOCKS_GUARD = threading.Lock()


def _path_lock(worktree: Path) -> threading.RLock:
    with _PATH_LOCKS_GUARD:
        return _PATH_LOCKS.setdefault(worktree, threading.RLock())


def _mounted_from(path: Path, source: Path) -> bool:
    """True when path's top mount is a bind of source's filesystem (same device)."""
    try:
        return os.stat(path).st_dev == os.stat(source).st_dev and source.is_mount()
    except OSError:
        return False


def _claim_stale(entry: Path) -> tuple[int, Path] | None:
    """Lock a dead owner's quota for release: (lock fd, worktree), or None to leave it be."""
    try:
        fd = lock_dir(entry, blocking=False)
        if fd is None:
            # Held: by a live owner (leave it), or by another sweeper (wait until it is done,
            # so this process never mounts over a tree that is still being copied back).
            pid = int(json.loads((entry / "record.json").read_text())["pid"])
            if _alive(pid):
                return None
            fd = lock_dir(entry, blocking=True)
        assert fd is not None
    except (OSError, ValueError, KeyError):
        return None
    try:  # read under the lock: a sweeper that went first deleted it
        worktree = Path(json.loads((entry / "record.json").read_text())["worktree"])
    except (OSError, ValueError, KeyError):
        os.close(fd)
        return None
    return fd, worktree


def sweep_stale(root: Path | None = None) -> int:
    """Release quotas whose owning process died (a host killed mid-run); returns how many."""
    base = root or quota_root()
    released = 0
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            claimed = _claim_stale(entry)
            if claimed is None:
                continue
            quota = WorkspaceQuota(entry, claimed[1])
            quota._lock_fd = claimed[0]
            try:
                quota.release()
                released += 1
            except SandboxStartError as exc:
                log.warning("sandbox.quota_sweep_failed", dir=str(entry), error=str(exc))
    return released


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
