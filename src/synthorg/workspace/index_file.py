"""The layout of a git index file: whether libgit2 can read it (no split, no mandatory
extension), its stat data's owners translated from one view of the tree to another, and a
stamp of its content.

libgit2 refuses an index with an extension it does not know that git marks mandatory (a
lower-case signature: ``link`` of a split index, ``sdir`` of a sparse one), and pygit2 then
also warns from its destructor. Walking the entries' sizes tells beforehand, without parsing
what they mean: ~the length of the file in small steps, for the private index of a small tree.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

_HEADER = 12
_FIXED = 62  # ctime, mtime, dev, ino, mode, uid, gid, size, oid (20), flags: up to the name
_UID = 28  # uid then gid, 4 bytes each, from an entry's start
_EXTENDED = 0x4000  # two more bytes of flags follow (version 3 and later)
_NAME_MASK = 0xFFF
_TRAILER = 20
_NO_CHECKSUM = bytes(_TRAILER)  # index.skipHash


class _Layout(ValueError):
    """Not an index this module reads (version, truncation, a name past the end)."""


def _walk(data: bytes) -> tuple[list[tuple[int, int]], int]:
    """((entry offset, flags) of every entry, offset of the first extension)."""
    if len(data) < _HEADER + _TRAILER or data[:4] != b"DIRC":
        raise _Layout("not an index")
    version = int.from_bytes(data[4:8], "big")
    count = int.from_bytes(data[8:12], "big")
    if version not in (2, 3, 4):
        raise _Layout(f"index version {version}")
    end = len(data) - _TRAILER
    pos = _HEADER
    entries = []
    try:
        for _ in range(count):
            flags = int.from_bytes(data[pos + _FIXED - 2 : pos + _FIXED], "big")
            entries.append((pos, flags))
            name = pos + _FIXED + (2 if flags & _EXTENDED else 0)
            if version == 4:  # a varint (bytes of the previous name to drop), then the suffix
                while data[name] & 0x80:
                    name += 1
                pos = data.index(b"\0", name + 1, end) + 1
                continue
            length = flags & _NAME_MASK
            if length == _NAME_MASK:  # a name this long is found by its NUL
                length = data.index(b"\0", name, end) - name
            pos += (name - pos + length + 8) & ~7  # NUL-padded to a multiple of 8
    except (IndexError, ValueError) as exc:
        raise _Layout("truncated") from exc
    return entries, pos


def _extensions(data: bytes, pos: int) -> Iterator[bytes]:
    """The signature of each extension from ``pos``; _Layout when they do not end at the
    trailer."""
    for sig, _ in _extension_offsets(data, pos):
        yield sig


def _extension_offsets(data: bytes, pos: int) -> Iterator[tuple[bytes, int]]:
    """(signature, offset of its content) of each extension from ``pos``."""
    end = len(data) - _TRAILER
    while pos + 8 <= end:
        yield data[pos : pos + 4], pos + 8
        pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "big")
    if pos != end:
        raise _Layout("extensions past the end")


def libgit2_readable(path: Path) -> bool:
    """Whether the index at ``path`` is a version 2-4 index whose every extension is optional
    and whose entries carry no extended flags (intent-to-add, skip-worktree: ``write-tree``
    treats those specially, so git is asked).

    False for anything else: unreadable, truncated, another version, a split or sparse index.
    """
    try:
        data = path.read_bytes()
        entries, pos = _walk(data)
        # mandatory (lower case): libgit2 knows none that git writes
        optional = all(b"A" <= sig[:1] <= b"Z" for sig in _extensions(data, pos))
    except (OSError, _Layout):
        return False
    return optional and not any(flags & _EXTENDED for _, flags in entries)


def reowned(
    data: bytes,
    old: tuple[int, int],
    new: tuple[int, int],
    *,
    shared: Callable[[bytes], bytes | None] | None = None,
) -> bytes | None:
    """The index ``data`` with every entry stat-recorded as owned by ``old`` (uid, gid)
    recorded as owned by ``new`` instead, its checksum made anew; None when it is not one
    this can rewrite (another layout, a hash other than SHA-1, a checksum that does not
    match, a split index without ``shared``: given the id of its shared index, the id of
    that index rewritten so too, which this one is then made to name; ``shared_in``).

    For a view of the same files through an idmapped mount (sandbox/idmap.py): only their
    owners differ there, so the stat cache stays exact and git re-hashes nothing it had not
    before; every other stat field is kept, so any change to a file still shows.
    """
    try:
        entries, pos = _walk(data)
        links = [at for sig, at in _extension_offsets(data, pos) if sig == b"link"]
    except _Layout:
        return None
    if len(links) > 1 or (links and shared is None):
        return None
    body = data[:-_TRAILER]
    if hashlib.sha1(body).digest() != data[-_TRAILER:]:  # noqa: S324 - git's own checksum
        return None
    out = bytearray(body)
    if links:  # the shared index's id, then its bitmaps (entry positions do not change)
        assert shared is not None
        at = links[0]
        moved = shared(bytes(out[at : at + _TRAILER]))
        if moved is None or len(moved) != _TRAILER:
            return None
        out[at : at + _TRAILER] = moved
    was, now = _ids(old), _ids(new)
    for start, _ in entries:
        if out[start + _UID : start + _UID + 8] == was:
            out[start + _UID : start + _UID + 8] = now
    out += hashlib.sha1(out).digest()  # noqa: S324
    return bytes(out)


def shared_in(
    git_dir: Path, old: tuple[int, int], new: tuple[int, int]
) -> Callable[[bytes], bytes | None]:
    """For ``reowned`` of a split index: its shared index (``sharedindex.<id>`` in the git
    dir, where git looks for it whatever the split index's own path) rewritten likewise and
    written there under its own id, which is returned (None when it cannot be)."""

    def rewrite(base_id: bytes) -> bytes | None:
        try:
            base = (git_dir / f"sharedindex.{base_id.hex()}").read_bytes()
        except OSError:
            return None
        moved = reowned(base, old, new)  # a shared index is never split itself
        if moved is None:
            return None
        moved_id = moved[-_TRAILER:]
        name = git_dir / f"sharedindex.{moved_id.hex()}"
        if not name.exists():
            tmp = name.with_name(f"{name.name}.{os.getpid()}.tmp")
            tmp.write_bytes(moved)
            os.replace(tmp, name)
        return moved_id

    return rewrite


def reown_file(
    src: Path, dst: Path, git_dir: Path, old: tuple[int, int], new: tuple[int, int]
) -> bool:
    """``reowned`` of the index at ``src`` (a split one's shared index in ``git_dir`` too),
    written to ``dst``; False, writing nothing, when it is not one that rewrites."""
    out = reowned(src.read_bytes(), old, new, shared=shared_in(git_dir, old, new))
    if out is None:
        return False
    dst.write_bytes(out)
    return True


#: ``reown_file`` in a child interpreter (``python -I -S -c REOWN_CHILD <this file> src dst
#: git_dir uid gid uid gid``): exit 0 written, 3 not rewritable. This module needs only the
#: standard library, so the child loads it by path, imports nothing else and starts in ~15 ms.
REOWN_CHILD = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("synthorg_index_file", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
src, dst, git_dir = (Path(a) for a in sys.argv[2:5])
ids = [int(a) for a in sys.argv[5:9]]
sys.exit(0 if module.reown_file(src, dst, git_dir, (ids[0], ids[1]), (ids[2], ids[3])) else 3)
"""


def _ids(owner: tuple[int, int]) -> bytes:
    return owner[0].to_bytes(4, "big") + owner[1].to_bytes(4, "big")


def stamp(path: Path) -> tuple[int, bytes] | None:
    """The index file's size and trailing checksum (git's hash of all its content).

    None when unreadable or when git skipped the checksum (``index.skipHash``): then the
    content cannot be told apart cheaply and nothing is cached.
    """
    try:
        with path.open("rb") as index:
            size = index.seek(0, os.SEEK_END)
            if size < 32:
                return None
            index.seek(-20, os.SEEK_END)
            trailer = index.read(20)
    except OSError:
        return None
    if trailer == _NO_CHECKSUM:
        return None
    return size, trailer


#: A tree of this many entries is big: its indexes are kept split (each write stores only
#: what changed), the snapshot journal skips its ignored directories.
BIG_TREE_ENTRIES = 2000


def index_entries(path: Path) -> int:
    """The number of entries the index at ``path`` says it holds (0: none, or unreadable)."""
    try:
        with path.open("rb") as index:
            header = index.read(_HEADER)
    except OSError:
        return 0
    if len(header) < _HEADER or header[:4] != b"DIRC":
        return 0
    return int.from_bytes(header[8:12], "big")
