"""A disk quota per sandbox: the worktree lives on a size-limited loop filesystem for the run.

Why a loop-mounted ext4 image: on a stock host (ext4 root without the ``quota``/``project``
features, no XFS) it is the only per-sandbox quota that gives a process inside a plain
ENOSPC; a tmpfs would cost RAM and a watchdog cannot refuse a write. It also gives the
worktree its own superblock, so /proc/self/mountinfo inside shows ``/ /workspace ...
/dev/loopN``, not the host path (which names the conversation).

A run's quota is layered (issue 31): an empty image of the allowance (mkfs of an empty image
takes milliseconds) holds the upper and work dirs of an overlay whose read-only lower layer
is the worktree itself; the overlay is bound over the worktree path, so host-side code
(checkpoints, views) sees what the sandbox writes. Nothing of the tree is read or copied at
start; at release the overlay is unmounted and only its upper is applied back (upper.py), so
both cost what the run changed, not the repository's size. The mount is the host's, not
bwrap's: the checkpoints read the run's view from the host during the run (and bwrap 0.8.0,
installed here, has no ``--overlay``).

A pooled slot's quota is a full copy (its tree is replaced at hand-over, while an overlay's
lower layer is fixed at mount). At start (host root): a sparse image sized to the worktree's
usage plus the allowance is made with ``mkfs.ext4 -d <worktree>`` (which copies the tree in),
mounted at a private directory, and bind-mounted over the worktree path. At release: the
bind is removed, what changed is copied back onto the real worktree with ``rsync -a -H
--checksum --sparse --delete`` (plain edits and additions by the host itself: copyback.py),
the image unmounted and deleted. The mounts are
system calls made in-process (mounts.py), not mount(8) processes.
Only what changed: right after the mount, the image's inode numbers are recorded with a time
mark; at release an entry whose path now holds another inode, or whose ctime is past the mark,
is listed (a directory with its contents, so deletions and renames inside it are applied).
ctime is the kernel's: no process inside can set or rewind it, unlike mtime and size; a
same-size edit made with a forged mtime is listed by its ctime. Unlisted entries are the ones
mkfs copied from the worktree and nobody touched since. Without the record (a host that died
before writing it) the whole tree is copied back as before. Every
mount is recorded in a host-only file; a host that died mid-run leaves a record that the
next backend start releases the same way.

Every quota dir has a lock (``flock``) held by its owner for the quota's whole life and by
whoever releases it. After a kill, every CLI process that boots sweeps, so several may reach
the same dead owner's quota at once; without the lock one copied back from a mount point
another had just unmounted (an empty directory, with ``--delete``) and wiped the worktree.
The kernel drops a dead owner's lock, so the lock is also the liveness test.

Each data dir keeps its quotas in its own dir under the host-wide root (``owner_root``): a
sweep settles only what processes of the same data dir left. Swept host-wide, one tenant's
hostile tree was copied back by another data dir's process.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from synthorg import overlaylog
from synthorg.faultpoints import pause_here
from synthorg.localsock import private_dir
from synthorg.logging import get_logger
from synthorg.reaper import run_tied
from synthorg.sandbox.copyback import copy_back_plain
from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.hostlock import lock_dir
from synthorg.sandbox.idmap import bind_idmapped
from synthorg.sandbox.mountinfo import is_mount_point, mounted_from, mounts_of, mounts_on
from synthorg.sandbox.mounts import bind, mount_image, mount_overlay, unmount
from synthorg.sandbox.treewalk import by_dir, entries_of, special, usage, walk
from synthorg.sandbox.upper import Bounds, UpperRefused, apply_upper

log = get_logger(__name__)

#: Host-only dir for images and records (disk-backed; /tmp may be RAM).
ROOT_ENV = "SYNTHORG_SANDBOX_QUOTA_DIR"
DEFAULT_ROOT = Path("/var/tmp/synthorg-quota")
_SLACK = 4 * 1024**2  # ext4's own metadata on a small image
_OVERHEAD = 1.10  # inode tables and directories on top of the tree's data
_MIN_IMAGE = 8 * 1024**2
_TIMEOUT_S = 300.0
TRASH = ".trash-"  # a released quota's dir being deleted
_INODES = "inodes.json"  # the image's inode numbers and time mark (see _record_inodes)
#: Timestamps come from a coarse clock (a tick is 1-10 ms): anything changed this close before
#: the mark counts as changed (more is copied back, never less).
_MARK_MARGIN_NS = 50_000_000


class PoolTooSmall(SandboxStartError):
    """A pooled sandbox's quota image is too small for the worktree it was to be given."""


def quota_root() -> Path:
    """Where images and records live on this host."""
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def owner_root(owner: Path, root: Path | None = None) -> Path:
    """The dir of one data dir's quotas under the host-wide root (made, 0700 and checked
    ours by the first quota mounted there: ``localsock.private_dir``)."""
    key = hashlib.sha256(os.fsencode(owner.resolve())).hexdigest()[:16]
    return (root or quota_root()) / f"owner-{key}"


def unavailable_reason() -> str | None:
    """Why per-sandbox quotas cannot work here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (loop mounts); the sandbox runs without a worktree quota"
    for tool, package in (("mkfs.ext4", "e2fsprogs"), ("rsync", "rsync")):
        if shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            return f"{tool} is missing (`apt-get install -y {package}`)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control) on this host"
    return None


def _run(*argv: str, input: bytes | None = None) -> None:
    try:
        done = run_tied(argv, input=input, timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxStartError(f"{argv[0]} failed: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).decode(errors="replace").strip()[-500:]
        raise SandboxStartError(f"{' '.join(argv[:2])} failed ({done.returncode}): {detail}")


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
        self.layered = False  # an overlay over the worktree (layered.md), else a full copy
        self.merged = dir / "merged"  # the overlay's mount point (layered)
        self.upper = self.mnt / "upper"  # on the image: what the run changed (layered)
        self.lower = dir / "lower"  # an idmapped clone of the worktree, if any (idmap.py)

    @property
    def cover(self) -> Path:
        """The mount bound over the worktree: the overlay, or the image itself."""
        return self.merged if self.layered else self.mnt

    @classmethod
    def mount(
        cls,
        worktree: Path,
        allowance: int,
        root: Path | None = None,
        *,
        layered: bool = True,
        idmap: tuple[int, int] | None = None,
        prepare: Callable[[], object] | None = None,
    ) -> WorkspaceQuota:
        """The quota over worktree: layered, an overlay whose upper layer is an empty image of
        the allowance's size; else (a pooled slot, which ``adopt`` fills later) a new image of
        the worktree's size plus allowance, holding a copy of it. Either is mounted over it.

        Sandboxes of one process on the same worktree share one quota (the first one's
        allowance), released by the last: a second image stacked over the first would be
        unmounted out of order and leak mounts. ``idmap`` (layered only): the overlay's lower
        layer shows the host owner's files as owned by that (uid, gid), the sandbox user's;
        IdmapUnsupported, with nothing mounted, where the kernel or filesystem cannot.
        ``prepare`` runs under the worktree's lock when this call mounts a new quota, not when
        it shares one (whose overlay then covers the tree: a walk would copy every file up).
        """
        key = worktree.resolve()
        with _path_lock(key):
            held = _HELD.get(key)
            if held is not None:
                held.users += 1
                return held
            if prepare is not None:
                prepare()
            quota = cls._mount_new(key, allowance, root, layered, idmap)
            _HELD[key] = quota
            return quota

    @classmethod
    def _mount_new(
        cls,
        worktree: Path,
        allowance: int,
        root: Path | None,
        layered: bool,
        idmap: tuple[int, int] | None,
    ) -> WorkspaceQuota:
        base = private_dir(root or quota_root())
        quota = cls(base / secrets.token_hex(8), worktree)  # resolved by mount
        quota.layered = layered
        quota.dir.mkdir(mode=0o700)
        quota._lock_fd = lock_dir(quota.dir, blocking=True)  # ours until release
        quota._record()
        try:
            quota._make_layered(allowance, idmap) if layered else quota._make(allowance)
        except BaseException:
            quota.release()
            raise
        return quota

    def _record(self) -> None:
        record = {"worktree": str(self.worktree), "pid": os.getpid(), "layered": self.layered}
        (self.dir / "record.json").write_text(json.dumps(record))

    def _make(self, allowance: int) -> None:
        self.size = max(int(usage(self.worktree) * _OVERHEAD) + allowance + _SLACK, _MIN_IMAGE)
        with open(self.image, "wb") as fh:
            fh.truncate(self.size)  # sparse: the host disk holds only what is written
        st = os.stat(self.worktree)
        _run(
            # -I 256: nanosecond timestamps, which _changed's ctime mark needs. Without it an
            # image under 512 MiB gets 128-byte inodes (whole seconds) from the mke2fs.conf of
            # e2fsprogs < 1.46.4, and an edit in the mount's second was never copied back.
            "mkfs.ext4", "-q", "-F", "-m", "0", "-i", "8192", "-I", "256", "-O", "^has_journal",
            "-E", f"nodiscard,root_owner={st.st_uid}:{st.st_gid}",
            "-d", str(self.worktree), str(self.image),
        )  # fmt: skip
        self.mnt.mkdir(mode=0o700)
        mount_image(self.image, self.mnt, fresh=True)  # system calls, not mount(8): mounts.py
        os.chmod(self.mnt, st.st_mode & 0o7777)
        if not (self.worktree / "lost+found").exists():  # mkfs's, not the tree's
            (self.mnt / "lost+found").rmdir()
        self._record_inodes()
        bind(self.mnt, self.worktree)

    def _make_layered(self, allowance: int, idmap: tuple[int, int] | None) -> None:
        """An empty image of the allowance (mkfs copies nothing in), the worktree as the
        overlay's read-only lower layer, its upper and work dirs on the image: nothing of the
        tree is read or copied, whatever its size. The image bounds what the run writes, in
        blocks and inodes, as the full copy's allowance did; a file the run edits is copied
        up whole, so that edit counts against the allowance too. With ``idmap`` the lower
        layer is an idmapped clone of the worktree (first: nothing else is made if the
        kernel cannot), so nothing of the tree is chowned either."""
        lower, readable = self.worktree, None  # the worktree itself: covered by the bind below
        if idmap is not None:
            self.lower.mkdir(mode=0o700)
            bind_idmapped(self.worktree, self.lower, idmap)
            lower = readable = self.lower
        self.size = max(allowance + _SLACK, _MIN_IMAGE)
        with open(self.image, "wb") as fh:
            fh.truncate(self.size)
        _run(
            "mkfs.ext4", "-q", "-F", "-m", "0", "-i", "8192", "-I", "256", "-O", "^has_journal",
            "-E", "nodiscard", str(self.image),
        )  # fmt: skip
        self.mnt.mkdir(mode=0o700)
        mount_image(self.image, self.mnt, fresh=True)
        st = os.stat(self.worktree)
        # The merged root shows the upper root's owner and mode: the worktree's own.
        self.upper.mkdir()
        os.chown(self.upper, st.st_uid, st.st_gid)
        os.chmod(self.upper, st.st_mode & 0o7777)
        (self.mnt / "work").mkdir(mode=0o700)
        (self.mnt / "lost+found").rmdir()
        self.merged.mkdir(mode=0o700)
        mount_overlay(lower, self.upper, self.mnt / "work", self.merged)
        bind(self.merged, self.worktree)
        overlaylog.mounted(self.worktree, self.dir.name, upper=self.upper, lower=readable)

    def adopt(self, worktree: Path, allowance: int) -> None:
        """Move this quota, mounted over a pooled sandbox's empty slot dir, onto worktree.

        The end state of ``mount(worktree, allowance)``: the image holds the worktree's tree,
        its inodes are recorded, it is bound over the worktree; the slot's bind is detached
        (the sandbox's own /workspace mount of the image stays). The slot's image was made
        larger than any run's (its size is not known in advance, and the kernel refuses an
        online grow without CAP_SYS_RESOURCE): ext4's root-reserved blocks leave the sandbox
        the room mount's image would (its user is not root and has no CAP_SYS_RESOURCE, so it
        cannot use them; the pool refuses a sandbox that runs as root). PoolTooSmall, with
        nothing changed, when the worktree does not fit.
        """
        slot, worktree = self.worktree, worktree.resolve()
        if self.layered:  # its lower layer is the slot dir, fixed at mount
            raise SandboxStartError("a layered quota cannot be handed another worktree")
        with _path_lock(worktree):
            if worktree in _HELD:
                raise SandboxStartError(f"{worktree} already has a quota in this process")
            want = max(int(usage(worktree) * _OVERHEAD) + allowance + _SLACK, _MIN_IMAGE)
            if want > self.size:
                raise PoolTooSmall(
                    f"the worktree needs a {want} B image, the slot has {self.size} B"
                )
            st = os.stat(worktree)
            _run("cp", "-a", "--", f"{worktree}/.", f"{self.mnt}/")
            os.chown(self.mnt, st.st_uid, st.st_gid)
            os.chmod(self.mnt, st.st_mode & 0o7777)
            self._reserve(want)
            self.worktree = worktree
            self._record()  # from here a sweep copies the image back onto the worktree
            self._record_inodes()
            bind(self.mnt, worktree)
            unmount(slot, lazy=True)  # busy: the sandbox's bwrap has its cwd there
            with _path_lock(slot):
                if _HELD.get(slot) is self:
                    del _HELD[slot]
            _HELD[worktree] = self

    def _reserve(self, want: int) -> None:
        """Reserve the blocks past a ``want``-byte image's for root (ext4 reads the count
        live; tune2fs writes it through the loop device's own cache). Only the count: another
        reserved uid would show in the mount's options, where mount reads it."""
        st, vfs = os.stat(self.mnt), os.statvfs(self.mnt)
        loop = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve().name
        # statvfs' total excludes ext4's overhead, which grows with the image: reserve the
        # same share of it, so what is left is what an image of ``want`` bytes would leave.
        blocks = vfs.f_blocks * (self.size - want) // self.size
        _run("tune2fs", "-r", str(blocks), f"/dev/{loop}")

    def _record_inodes(self) -> None:
        """The image as mkfs made it: each path's inode, and a mark on the kernel's clock.

        Host-only (the quota dir); read at release to copy back only what changed since.
        """
        mark = self.dir / "mark"
        mark.touch()
        since = mark.stat().st_ctime_ns - _MARK_MARGIN_NS
        inodes = {rel: entry.inode() for rel, entry in walk(self.mnt)}
        inodes["."] = os.lstat(self.mnt).st_ino
        tmp = self.dir / f"{_INODES}.tmp"
        tmp.write_text(json.dumps({"since_ns": since, "inodes": inodes}))
        tmp.rename(self.dir / _INODES)

    def _changed(self) -> list[str] | None:
        """What to copy back (rsync --files-from entries; ``dir/.`` is a directory with its
        contents), or None when the image's record is missing: copy everything."""
        try:
            record = json.loads((self.dir / _INODES).read_text())
            since, inodes = int(record["since_ns"]), dict(record["inodes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        try:
            entries = list(entries_of(self.mnt))
        except OSError as exc:  # never skip what could not be read: copy everything
            log.warning("sandbox.quota_walk_failed", dir=str(self.dir), error=str(exc))
            return None
        before, now = by_dir(inodes), by_dir(rel for rel, _ in entries)
        listed: list[str] = []
        specials = [rel for rel, st in entries if special(st)]
        if specials:
            log.warning("sandbox.quota_specials_not_copied", dir=str(self.dir),
                        count=len(specials), first=specials[:5],
                        reason="FIFOs, sockets and devices stay in the image")  # fmt: skip
        for rel, st in entries:
            if special(st):
                continue
            if inodes.get(rel) == st.st_ino and st.st_ctime_ns < since:
                continue  # as mkfs copied it from the worktree, untouched since
            if not stat.S_ISDIR(st.st_mode):
                listed.append(rel)
            elif (
                inodes.get(rel) != st.st_ino  # new, or another one moved here
                or before.get(rel) != now.get(rel)  # entries added, removed or renamed
                or not self._same_attributes(rel, st)
            ):
                listed.append(f"{rel}/.")
            # else the same names as recorded (nothing to delete there) and the worktree's
            # owner and mode: copying it would change nothing, and its entries are judged on
            # their own. (The root's ctime is always recent: set up just before the mark.)
        return listed

    def _same_attributes(self, rel: str, st: os.stat_result) -> bool:
        try:
            there = os.lstat(self.worktree / rel)
        except OSError:
            return False
        return (there.st_mode, there.st_uid, there.st_gid) == (st.st_mode, st.st_uid, st.st_gid)

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
        self._follow_worktree()
        if self.worktree.is_mount():
            if mounted_from(self.worktree, self.cover):
                unmount(self.worktree)
                pause_here("quota-unbound")  # the fault suite's kill point: work not back yet
            elif self.cover.is_mount():
                # Another run's quota covers ours (a successor took the run over while this
                # process was stopped), so our image is stale: copying it back would overwrite
                # the live tree, unmounting would remove theirs. Keep ours and its record;
                # when theirs is released its copy-back lands in our image, which a later
                # sweep puts back.
                raise SandboxStartError(
                    f"quota {self.dir} is covered by another quota on {self.worktree}; "
                    "left for a later sweep"
                )
        if self.layered and self.merged.is_mount():
            unmount(self.merged)  # the lower layer must not change under a live overlay
        if is_mount_point(self.lower):  # before the dir is discarded: rmtree would walk in
            unmount(self.lower)
        if not self.mnt.is_mount() and self.image.exists() and self.mnt.exists():
            mount_image(self.image, self.mnt)
        refused: UpperRefused | None = None
        changed: frozenset[str] | None = None  # what the landing may trust, once applied
        if self.mnt.is_mount():
            if self.worktree.is_dir():  # a worktree deleted meanwhile gets nothing back
                if self.layered:
                    refused, changed = self._apply_upper()
                else:
                    self._copy_back()
            unmount(self.mnt)
        overlaylog.released(self.worktree, self.dir.name, changed)
        still = [str(point) for point, _ in mounts_of(self.image)]
        if is_mount_point(self.lower):
            still.append(str(self.lower))
        if still:  # deleting it would lose what is written there, and leave a dead mount
            raise SandboxStartError(
                f"quota image {self.image} is still mounted at {', '.join(still)}; "
                "kept for a later sweep"
            )
        _discard(self.dir)
        if refused is not None:  # discarded all the same: a later sweep would refuse it again
            raise refused

    def _apply_upper(self) -> tuple[UpperRefused | None, frozenset[str] | None]:
        """The run's changes (the overlay's upper) onto the worktree, within what the image
        could hold, and the paths they changed; the refusal, with nothing applied, when the
        upper is past that."""
        if not self.upper.is_dir():  # died before the overlay was made: nothing was written
            return None, None
        vfs = os.statvfs(self.mnt)
        bounds = Bounds(entries=vfs.f_files, data_bytes=vfs.f_blocks * vfs.f_frsize)
        try:
            applied = apply_upper(self.upper, self.worktree, bounds)
        except UpperRefused as exc:
            log.error("sandbox.quota_upper_refused", dir=str(self.dir), error=str(exc))
            return exc, None
        return None, applied.changed

    def _follow_worktree(self) -> None:
        """Point ``worktree`` at where the image's bind is now, or refuse to release.

        Renaming the worktree or a parent of it (a user moving a project dir, pytest renaming
        a stale basetemp to ``garbage-*``) takes the bind along: the recorded path is empty
        or gone, and the run's work is in the image under the new path. Released from the
        recorded path, the image was deleted while mounted there. A mount of the image that
        is not a whole bind of it is none of ours: the image stays.
        """
        mounts = self._cover_mounts()
        mnt, recorded = Path(os.path.realpath(self.cover)), Path(os.path.realpath(self.worktree))
        elsewhere = [(point, top) for point, top in mounts if point != mnt]
        if not elsewhere or any(point == recorded for point, _ in elsewhere):
            return
        if len(elsewhere) == 1 and elsewhere[0][1] == "/":
            log.warning("sandbox.quota_worktree_moved", dir=str(self.dir),
                        recorded=str(self.worktree), now=str(elsewhere[0][0]))  # fmt: skip
            self.worktree = elsewhere[0][0]
            return
        raise SandboxStartError(
            f"quota image {self.image} is mounted at {', '.join(str(p) for p, _ in elsewhere)}, "
            f"not over its worktree {self.worktree}; left mounted for a later sweep"
        )

    def _cover_mounts(self) -> list[tuple[Path, str]]:
        """Every mount of the cover's filesystem: the image's, or the live overlay's."""
        if not self.layered:
            return mounts_of(self.image)
        if not self.merged.is_mount():
            return []
        dev = os.stat(self.merged).st_dev
        return mounts_on(f"{os.major(dev)}:{os.minor(dev)}")

    def _copy_back(self) -> None:
        # --checksum: compare content, never size+mtime, which the sandbox sets (a same-size
        # fix in the second the worktree was made was skipped: NO_OP). --sparse: a sparse file
        # costs the image no blocks, so the quota never limits it; written out in full, files
        # of RLIMIT_FSIZE each landed on the host disk past the quota. -H, likewise: a hard
        # link costs the image no blocks, a copy per link would (a new link changes the file's
        # ctime, so every name of it is listed and linked again). No set-id bits and nothing
        # world-writable lands on the host (git records only the x bit).
        # --no-specials --no-devices: a FIFO (or socket) the sandbox made stays in the image;
        # copied back, every host reader of the worktree (the gate's scan, an editor) blocked
        # on it. _changed logs which were left.
        # --no-owner --no-group: what lands is the host's, not the sandbox user's (a later
        # idmapped run maps only the host's ids; identity.host_owner).
        rsync = ["rsync", "-a", "-H", "--checksum", "--sparse", "--delete", "--chmod=ug-s,o-w",
                 "--no-specials", "--no-devices", "--no-owner", "--no-group"]  # fmt: skip
        changed = self._changed()
        if changed is None:
            _run(*rsync, f"{self.mnt}/", f"{self.worktree}/")
        elif changed and not copy_back_plain(self.mnt, self.worktree, changed):
            # Plain edits and additions were copied in-process (copyback.py); the rest:
            # --dirs: a listed ``dir/.`` brings its entries (deleting the worktree's others),
            # not its subtree; -a implies no recursion with --files-from. NUL-separated:
            # names may hold newlines.
            listing = b"\0".join(map(os.fsencode, changed))
            _run(*rsync, "--dirs", "--from0", "--files-from=-",
                 f"{self.mnt}/", f"{self.worktree}/", input=listing)  # fmt: skip


def _discard(dir: Path) -> None:
    """Delete a released quota's dir off the caller's path (unlinking the image costs tens of
    ms under load, before the gate can run): renamed to a trash name first, so no sweeper
    takes it for a quota; one left by a killed process goes at the next sweep."""
    trash = dir.with_name(f"{TRASH}{dir.name}")
    try:
        (dir / "record.json").unlink(missing_ok=True)  # whatever the name, no quota to claim
        dir.rename(trash)
    except OSError:
        shutil.rmtree(dir, ignore_errors=True)
        return
    # Not a daemon: a process that exits normally finishes the delete first.
    threading.Thread(target=shutil.rmtree, args=(trash, True), name="quota-discard").start()


def held(worktree: Path) -> bool:
    """Whether a sandbox of this process already has a quota over worktree."""
    return worktree.resolve() in _HELD


_HELD: dict[Path, WorkspaceQuota] = {}
_PATH_LOCKS: dict[Path, threading.RLock] = {}
_PATH_LOCKS_GUARD = threading.Lock()


def _path_lock(worktree: Path) -> threading.RLock:
    with _PATH_LOCKS_GUARD:
        return _PATH_LOCKS.setdefault(worktree, threading.RLock())
