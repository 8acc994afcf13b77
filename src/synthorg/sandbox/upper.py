"""Applying an overlay's upper layer (what a run changed) back onto the host worktree.

The run's worktree is an overlay (quota.py): the real worktree is its read-only lower layer,
the upper layer lives on the quota's image. Once the sandbox has ended and the overlay is
unmounted, the upper holds exactly what the run changed, in overlayfs' own encoding:

- a regular file, symlink or directory: created or replaced (a file the run only edited was
  copied up whole; a hard link made in the run is a second name of one upper inode);
- a character device 0/0: a whiteout, the lower entry of that name deleted;
- a directory with ``trusted.overlay.opaque=y``: replaces the lower directory (its entries
  are deleted first);
- renames: with ``redirect_dir=nofollow`` (mounts.py) a directory rename is refused with
  EXDEV and tools copy, so every rename is a delete (whiteout) plus a create.

The upper was written by the kernel on the sandbox's behalf; its names, modes, owners, link
targets and sizes are the agent's. So: sizes and counts are checked before anything is
copied, nothing is followed (every worktree path is opened one component at a time with
O_NOFOLLOW relative to its parent), everything lands owned by the host (``host_owner``), set-id
bits and world write are stripped, FIFOs,
sockets and devices stay behind, and an overlay xattr that would make the kernel read
anything but the upper entry itself (redirect, metacopy, xwhiteout) refuses the whole apply.
``trusted.*`` xattrs need CAP_SYS_ADMIN on the host: the agent cannot set them (the kernel
also refuses overlay xattrs set through the overlay), and ``user.overlay.*`` means nothing to
an overlay mounted without ``userxattr``, so it is ignored here too (xattrs are not copied).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.sandbox.copyback import STRIP, open_dir
from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.identity import host_owner
from synthorg.sandbox.treewalk import MAX_REL

log = get_logger(__name__)

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_OVERLAY = "trusted.overlay."
#: Overlay xattrs the kernel writes on an upper entry that change nothing about what the
#: entry is: where a copy-up came from, a dir holding copied-up entries, the layer's uuid.
_HARMLESS = {"origin", "impure", "uuid", "opaque"}


class UpperRefused(SandboxStartError):
    """The upper layer is past the quota's bounds or holds what overlayfs would not read as
    a plain entry: nothing of it is applied."""


@dataclass(frozen=True)
class Bounds:
    """What an upper layer may hold: the quota's image could hold no more."""

    entries: int
    """Names in the upper (whiteouts and hard links included)."""
    data_bytes: int
    """Bytes of file data (blocks in use, so a sparse file's holes cost nothing)."""


@dataclass
class _Entry:
    rel: str
    kind: str  # "dir", "file", "link", "whiteout"
    st: os.stat_result
    opaque: bool = False


@dataclass
class _Plan:
    entries: list[_Entry] = field(default_factory=list)
    specials: list[str] = field(default_factory=list)
    too_deep: bool = False


def _overlay_xattrs(path: str) -> dict[str, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    return {
        name[len(_OVERLAY) :]: os.getxattr(path, name, follow_symlinks=False)
        for name in names
        if name.startswith(_OVERLAY)
    }


def _classify(path: str, rel: str, st: os.stat_result) -> _Entry | None:
    """The entry's meaning to overlayfs; None for a special file; UpperRefused when the
    kernel would have read it as anything but itself."""
    marks = _overlay_xattrs(path)
    odd = sorted(set(marks) - _HARMLESS)
    if odd or ("opaque" in marks and not stat.S_ISDIR(st.st_mode)):
        raise UpperRefused(f"upper entry {rel!r} carries overlay xattrs {odd or ['opaque']}")
    if stat.S_ISDIR(st.st_mode):
        opaque = marks.get("opaque")
        if opaque not in (None, b"y"):
            raise UpperRefused(f"upper dir {rel!r} has opaque={opaque!r}")
        return _Entry(rel, "dir", st, opaque=opaque == b"y")
    if stat.S_ISREG(st.st_mode):
        return _Entry(rel, "file", st)
    if stat.S_ISLNK(st.st_mode):
        return _Entry(rel, "link", st)
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        return _Entry(rel, "whiteout", st)
    return None


def _plan(upper: Path, bounds: Bounds) -> _Plan:
    """Every entry of the upper, parents first, checked against bounds before any copy."""
    plan = _Plan()
    data = 0
    counted: set[tuple[int, int]] = set()  # a hard link's data once
    stack = ["."]
    while stack:
        rel = stack.pop()
        base = str(upper) if rel == "." else f"{upper}/{rel}"
        with os.scandir(base) as listing:
            children = sorted(listing, key=lambda e: e.name)
        for entry in children:
            child = entry.name if rel == "." else f"{rel}/{entry.name}"
            if len(os.fsencode(child)) > MAX_REL:
                plan.too_deep = True
                continue
            if len(plan.entries) + len(plan.specials) >= bounds.entries:
                raise UpperRefused(f"the upper holds more than {bounds.entries} entries")
            st = entry.stat(follow_symlinks=False)
            classified = _classify(entry.path, child, st)
            if classified is None:
                plan.specials.append(child)
                continue
            if classified.kind == "file" and (st.st_dev, st.st_ino) not in counted:
                counted.add((st.st_dev, st.st_ino))
                data += st.st_blocks * 512
                if data > bounds.data_bytes:
                    raise UpperRefused(f"the upper holds more than {bounds.data_bytes} B")
            plan.entries.append(classified)
            if classified.kind == "dir":
                stack.append(child)
    return plan


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


def _remove(dir_fd: int, name: str) -> None:
    """Delete name (a whole tree for a dir) in dir_fd, never following a symlink."""
    there = _lstat(dir_fd, name)
    if there is None:
        return
    if stat.S_ISDIR(there.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # the fd-based walk: no symlink is followed
    else:
        os.unlink(name, dir_fd=dir_fd)


def _empty(dir_fd: int) -> None:
    for name in os.listdir(dir_fd):
        _remove(dir_fd, name)


def _attributes(fd: int, st: os.stat_result) -> None:
    os.fchown(fd, *host_owner())  # not the sandbox user's: the next run's idmap maps the host's
    os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~STRIP)
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def _copy_data(source: int, out: int, size: int) -> None:
    """The file's data segments only: holes stay holes (host disk use = the image's)."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(source, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        end = os.lseek(source, start, os.SEEK_HOLE)
        os.lseek(out, start, os.SEEK_SET)
        while start < end:  # sendfile: copy_file_range refuses across filesystems (EXDEV)
            sent = os.sendfile(out, source, start, min(_CHUNK, end - start))
            if sent == 0:
                break
            start += sent
        offset = end
    os.ftruncate(out, size)


def _replace(dst_dir: int, name: str, tmp: str) -> None:
    """tmp over name; a dir at name is deleted first (rename cannot replace one)."""
    there = _lstat(dst_dir, name)
    if there is not None and stat.S_ISDIR(there.st_mode):
        shutil.rmtree(name, dir_fd=dst_dir)
    os.rename(tmp, name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)


def _tmp_name() -> str:
    """A fresh name beside the target (never derived from it: a 255-byte name has no room)."""
    return f".synthorg-{secrets.token_hex(8)}"


@dataclass(frozen=True)
class Applied:
    """What an apply did: the upper's entries, and the worktree paths they changed."""

    entries: int
    changed: frozenset[str] | None
    """Every path whose entry may differ from before: files, links and deletions, and the
    directories made or replaced whole (an edit's parent, copied up, is not one). None when
    some entry was left out (too deep), so the list is not the whole change."""


class _Applier:
    def __init__(self, upper: Path, worktree_fd: int) -> None:
        self.upper = upper
        self.dst = worktree_fd
        self.linked: dict[tuple[int, int], str] = {}  # upper inode -> first name landed
        self.changed: set[str] = set()

    def _parent(self, rel: str) -> tuple[int, str]:
        parent, _, name = rel.rpartition("/")
        return open_dir(self.dst, parent or "."), name

    def apply(self, entry: _Entry) -> None:
        dst_dir, name = self._parent(entry.rel)
        if entry.kind != "dir":
            self.changed.add(entry.rel)
        try:
            if entry.kind == "whiteout":
                _remove(dst_dir, name)
            elif entry.kind == "dir":
                self._dir(dst_dir, name, entry)
            elif entry.kind == "link":
                self._link(dst_dir, name, entry)
            else:
                self._file(dst_dir, name, entry)
        finally:
            os.close(dst_dir)

    def _dir(self, dst_dir: int, name: str, entry: _Entry) -> None:
        there = _lstat(dst_dir, name)
        if there is not None and not stat.S_ISDIR(there.st_mode):
            os.unlink(name, dir_fd=dst_dir)  # a file or symlink the dir replaces
            there = None
        if there is None or entry.opaque:
            self.changed.add(entry.rel)  # all of it is new
        if there is None:
            os.mkdir(name, 0o700, dir_fd=dst_dir)  # its attributes once its entries are in
        elif entry.opaque:
            fd = os.open(name, _DIR, dir_fd=dst_dir)
            try:
                _empty(fd)
            finally:
                os.close(fd)

    def _link(self, dst_dir: int, name: str, entry: _Entry) -> None:
        target = os.readlink(f"{self.upper}/{entry.rel}")
        tmp = _tmp_name()
        os.symlink(target, tmp, dir_fd=dst_dir)
        os.chown(tmp, *host_owner(), dir_fd=dst_dir, follow_symlinks=False)
        _replace(dst_dir, name, tmp)

    def _file(self, dst_dir: int, name: str, entry: _Entry) -> None:
        tmp = _tmp_name()
        key = (entry.st.st_dev, entry.st.st_ino)
        first = self.linked.get(key) if entry.st.st_nlink > 1 else None
        if first is not None:  # another name of a file already landed: a link, not a copy
            first_dir, first_name = self._parent(first)
            try:
                os.link(first_name, tmp, src_dir_fd=first_dir, dst_dir_fd=dst_dir,
                        follow_symlinks=False)  # fmt: skip
            finally:
                os.close(first_dir)
            _replace(dst_dir, name, tmp)
            return
        source = os.open(f"{self.upper}/{entry.rel}", _READ)
        try:
            st = os.fstat(source)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != key:
                raise UpperRefused(f"upper entry {entry.rel!r} changed while applied")
            out = os.open(tmp, _WRITE, 0o600, dir_fd=dst_dir)
            try:
                _copy_data(source, out, st.st_size)
                _attributes(out, st)
            except BaseException:
                os.close(out)
                os.unlink(tmp, dir_fd=dst_dir)
                raise
            os.close(out)
        finally:
            os.close(source)
        _replace(dst_dir, name, tmp)
        if entry.st.st_nlink > 1:
            self.linked[key] = entry.rel

    def dir_attributes(self, entry: _Entry) -> None:
        fd = open_dir(self.dst, entry.rel)
        try:
            _attributes(fd, entry.st)
        finally:
            os.close(fd)


def apply_upper(upper: Path, worktree: Path, bounds: Bounds) -> Applied:
    """Apply the upper layer onto worktree (the overlay unmounted, the sandbox ended);
    returns how many entries were applied and the paths they changed. UpperRefused, with
    nothing applied, when the upper is past bounds or holds an entry overlayfs would not read
    as itself. Idempotent: a release killed half-way applies the same upper again."""
    plan = _plan(upper, bounds)
    if plan.specials:
        log.warning("sandbox.quota_specials_not_copied", upper=str(upper),
                    count=len(plan.specials), first=plan.specials[:5],
                    reason="FIFOs, sockets and devices stay in the image")  # fmt: skip
    if plan.too_deep:
        log.warning("sandbox.quota_path_too_deep", dir=str(upper))
    dst = os.open(worktree, _DIR)
    try:
        applier = _Applier(upper, dst)
        for entry in plan.entries:
            applier.apply(entry)
        for entry in reversed(plan.entries):  # a dir's mtime once its entries are in
            if entry.kind == "dir":
                applier.dir_attributes(entry)
    finally:
        os.close(dst)
    # Specials stay behind, but the path's entry may still be gone (a FIFO over a file).
    changed = None if plan.too_deep else frozenset(applier.changed.union(plan.specials))
    return Applied(len(plan.entries), changed)
