"""The layout of a git index file: whether libgit2 can read it (no split, no mandatory extension).

libgit2 refuses an index with an extension it does not know that git marks mandatory (a
lower-case signature: ``link`` of a split index, ``sdir`` of a sparse one), and pygit2 then
also warns from its destructor. Walking the entries' sizes tells beforehand, without parsing
what they mean: ~the length of the file in small steps, for the private index of a small tree.
"""

from __future__ import annotations

from pathlib import Path

_HEADER = 12
_FIXED = 62  # ctime, mtime, dev, ino, mode, uid, gid, size, oid (20), flags: up to the name
_EXTENDED = 0x4000  # two more bytes of flags follow (version 3 and later)
_NAME_MASK = 0xFFF
_TRAILER = 20


def libgit2_readable(path: Path) -> bool:
    """Whether the index at ``path`` is a version 2-4 index whose every extension is optional
    and whose entries carry no extended flags (intent-to-add, skip-worktree: ``write-tree``
    treats those specially, so git is asked).

    False for anything else: unreadable, truncated, another version, a split or sparse index.
    """
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if len(data) < _HEADER + _TRAILER or data[:4] != b"DIRC":
        return False
    version = int.from_bytes(data[4:8], "big")
    count = int.from_bytes(data[8:12], "big")
    if version not in (2, 3, 4):
        return False
    end = len(data) - _TRAILER
    pos = _HEADER
    try:
        for _ in range(count):
            flags = int.from_bytes(data[pos + _FIXED - 2 : pos + _FIXED], "big")
            if flags & _EXTENDED:
                return False
            name = pos + _FIXED
            if version == 4:  # a varint (bytes of the previous name to drop), then the suffix
                while data[name] & 0x80:
                    name += 1
                pos = data.index(b"\0", name + 1, end) + 1
                continue
            length = flags & _NAME_MASK
            if length == _NAME_MASK:  # a name this long is found by its NUL
                length = data.index(b"\0", name, end) - name
            pos += (_FIXED + length + 8) & ~7  # NUL-padded to a multiple of 8
    except (IndexError, ValueError):
        return False
    while pos + 8 <= end:
        signature = data[pos : pos + 4]
        if not b"A" <= signature[:1] <= b"Z":
            return False  # mandatory: libgit2 knows none that git writes
        pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "big")
    return pos == end
