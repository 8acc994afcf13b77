"""A change journal for a worktree from Linux inotify, so snapshots re-hash only what changed.

Without it every checkpoint must lstat() every file (20,000 files cost ~45 ms of system time
on our hosts). The journal only narrows what ``git add`` looks at: whenever it cannot be sure
(queue overflow, a watched directory moved, no inotify on this platform, too many watches) it
says "everything" and the caller falls back to a full scan.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x1000000
_IN_DONT_FOLLOW = 0x2000000
_IN_EXCL_UNLINK = 0x4000000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW  # a directory swapped for a symlink must not make us watch the host
    | _IN_EXCL_UNLINK
)
_HEADER = struct.Struct("iIII")
_MAX_WATCHES = 50_000
_MAX_JOURNALS = 16  # inotify instances are capped per user (often 128) across processes


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()


@dataclass
class ChangeSet:
    """What changed since the last drain: paths relative to the root, or everything."""

    everything: bool = False
    paths: set[str] = field(default_factory=set)


class Journal:
    """Watches every directory of a worktree (except .git and wholly ignored ones)."""

    def __init__(self, root: Path, skip: set[str]) -> None:
        self.root = root
        self._skip = skip  # relative dirs not to watch: git metadata, wholly ignored trees
        self._fd = -1
        self._wds: dict[int, str] = {}
        self._pending = ChangeSet()
        self._root_id: tuple[int, int] | None = None

    @property
    def active(self) -> bool:
        """Whether the journal is watching."""
        return self._fd >= 0

    def start(self, dirs: Sequence[str] | None = None) -> bool:
        """Begin watching; False (and inactive) when the platform or limits do not allow it.

        Events are only recorded from now on: the caller must do one full scan after this.
        ``dirs``: every directory of the tree, relative, already listed (by a ``find`` of
        the layer under a run's overlay, off the event loop): each is watched without a
        walk. One made meanwhile is the caller's to ``note`` (the overlay's upper has it).
        """
        if _LIBC is None:
            return False
        fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return False
        self._fd = fd
        self._root_id = _identity(self.root)
        placed = self._watch_tree("") if dirs is None else self._watch_listed(dirs)
        if not placed:
            self.close()
            return False
        return True

    def _watch_listed(self, dirs: Sequence[str]) -> bool:
        return all(
            self._watch(self.root / rel if rel else self.root, rel)
            for rel in ("", *dirs)
            if not (rel and self._skipped(rel))
        )

    def _watch(self, path: str | Path, rel: str) -> bool:
        """Watch the directory at ``path`` (``rel`` to the root); False when the limits do
        not allow it. One gone meanwhile is no failure: its parent reported it."""
        if len(self._wds) >= _MAX_WATCHES:
            return False
        assert _LIBC is not None
        wd = _LIBC.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:
            return ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR)
        self._wds[wd] = rel
        return True

    def note(self, paths: set[str] | None, dirs: Collection[str] = ()) -> None:
        """Count ``paths`` as changed since the journal started (None: everything), as if
        their events had come: what changed before the watches landed. ``dirs``, those of
        them that are directories, are watched too when they are not: one made while the
        watches were being placed, after its parent was listed and before the parent's
        watch, is not seen by any (what it holds until now is named by its path)."""
        if paths is None:
            self._pending.everything = True
            return
        self._pending.paths.update(paths)
        watched = set(self._wds.values())
        for rel in sorted(dirs):
            if rel not in watched and not self._skipped(rel) and not self._watch_tree(rel):
                self._pending.everything = True
                return

    def _skipped(self, rel: str) -> bool:
        """Whether ``rel`` is in or under .git or a skipped dir."""
        if rel.split("/", 1)[0] == ".git":
            return True
        at = len(rel)
        while at > 0:
            if rel[:at] in self._skip:
                return True
            at = rel.rfind("/", 0, at)
        return False

    def close(self) -> None:
        """Stop watching and release the inotify instance."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._wds.clear()

    def drain(self) -> ChangeSet:
        """Changes seen since the previous drain (a full-scan request if unsure)."""
        if not self.active:
            return ChangeSet(everything=True)
        if _identity(self.root) != self._root_id:
            # Another filesystem was mounted over the worktree (a sandbox's quota image) or
            # taken away: the watches see the layer underneath, where nothing is written.
            self._pending = ChangeSet()
            return ChangeSet(everything=True)
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                self._pending.everything = True
                break
            self._parse(data)
        result, self._pending = self._pending, ChangeSet()
        return result

    def _parse(self, data: bytes) -> None:
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            raw_name = data[offset + _HEADER.size : offset + _HEADER.size + length]
            offset += _HEADER.size + length
            name = raw_name.rstrip(b"\0").decode("utf-8", "surrogateescape")
            if mask & _IN_Q_OVERFLOW:
                self._pending.everything = True
                continue
            base = self._wds.get(wd)
            if base is None:
                continue
            if mask & _IN_IGNORED:
                self._wds.pop(wd, None)
                continue
            if mask & _IN_MOVE_SELF:
                # A watched directory moved: our paths for it and below are now wrong.
                self._pending.everything = True
                continue
            if mask & _IN_DELETE_SELF or not name:
                continue
            rel = f"{base}/{name}" if base else name
            if rel in self._skip or rel.split("/", 1)[0] == ".git":
                continue
            self._pending.paths.add(rel)
            # Files made in a new directory before its watch lands are covered: the whole
            # directory is reported.
            new_dir = mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO)
            if new_dir and not self._watch_tree(rel):
                self._pending.everything = True

    def _watch_tree(self, rel: str) -> bool:
        top = self.root / rel if rel else self.root
        if rel and os.path.realpath(top) != os.path.join(os.path.realpath(self.root), rel):
            # A name the agent made a symlink (or put under one) after it was reported:
            # walked, it would watch the host's tree. Its path is reported; not watched.
            return True
        for dirpath, dirnames, _ in os.walk(top):
            here = os.path.relpath(dirpath, self.root)
            here = "" if here == "." else here
            dirnames[:] = [
                d
                for d in dirnames
                if d != ".git" and (f"{here}/{d}" if here else d) not in self._skip
            ]
            if not self._watch(dirpath, here):
                return False
        return True


class JournalRegistry:
    """At most a few live journals per process, least recently used closed first."""

    def __init__(self, limit: int = _MAX_JOURNALS) -> None:
        self._limit = limit
        self._journals: OrderedDict[str, Journal] = OrderedDict()

    def get(self, key: str) -> Journal | None:
        """The live journal for ``key``, if any."""
        journal = self._journals.get(key)
        if journal is not None:
            self._journals.move_to_end(key)
        return journal

    def add(self, key: str, journal: Journal) -> None:
        """Register a started journal, evicting the least recently used beyond the limit."""
        self.discard(key)
        self._journals[key] = journal
        while len(self._journals) > self._limit:
            _, old = self._journals.popitem(last=False)
            old.close()

    def discard(self, key: str) -> None:
        """Close and forget the journal for ``key``."""
        journal = self._journals.pop(key, None)
        if journal is not None:
            journal.close()


JOURNALS = JournalRegistry()
"""The process-wide registry, keyed by the private index path of a checkout."""


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path`` now: what a mount over it changes."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
