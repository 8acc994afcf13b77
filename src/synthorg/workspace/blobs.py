"""What the gate checks about the files a change adds: their size and whether they are cores."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from synthorg.workspace.checkout import Checkout
from synthorg.workspace.objects import InProcessUnavailable, object_sizes
from synthorg.workspace.views import EntryChange

_CORE_NAME = re.compile(r"core(\.\d+)?|vgcore\.\d+")
_ELF_HEADER = 20
_ET_CORE = 4
_REGULAR_MODES = ("100644", "100755")


@dataclass(frozen=True, slots=True)
class NewBlob:
    """A regular file the change adds or modifies: its path and blob."""

    path: str
    sha: str


def is_core_name(path: str) -> bool:
    """Whether the file name is one the kernel or a debugger gives a core dump."""
    return _CORE_NAME.fullmatch(PurePosixPath(path).name) is not None


def is_elf_core(header: bytes) -> bool:
    """Whether ``header`` (the first 20 bytes of a file) starts an ELF core file."""
    if len(header) < _ELF_HEADER or not header.startswith(b"\x7fELF"):
        return False
    if header[5] == 1:
        return int.from_bytes(header[16:18], "little") == _ET_CORE
    return int.from_bytes(header[16:18], "big") == _ET_CORE


def new_blobs(entries: Sequence[EntryChange]) -> list[NewBlob]:
    """The regular files among a tree diff's changed entries that are new or changed (a
    renamed or copied file's new path included): what the gate checks by size and kind."""
    return [
        NewBlob(path=e.path, sha=e.sha)
        for e in entries
        if e.letter != "D" and e.mode in _REGULAR_MODES
    ]


async def oversize_and_cores(
    checkout: Checkout, blobs: list[NewBlob], limit: int
) -> tuple[list[tuple[str, int]], list[str]]:
    """(files over ``limit`` with their sizes, core dumps) among ``blobs``."""
    if not blobs:
        return [], []
    try:  # object headers read in-process; git when libgit2 cannot
        sizes = object_sizes(checkout.dirs.common_dir, [b.sha for b in blobs])
    except InProcessUnavailable:
        sizes = await _sizes_by_git(checkout, blobs)
    oversize = [(b.path, sizes[b.sha]) for b in blobs if sizes.get(b.sha, 0) > limit]
    cores = [
        b.path
        for b in blobs
        if is_core_name(b.path) or is_elf_core(_head(checkout.dirs.work_tree, b.path))
    ]
    return oversize, cores


async def _sizes_by_git(checkout: Checkout, blobs: list[NewBlob]) -> dict[str, int]:
    listing = await checkout.run(
        ["cat-file", "--batch-check=%(objectname) %(objectsize)"],
        stdin="".join(f"{b.sha}\n" for b in blobs).encode(),
    )
    sizes = {}
    for line in listing.text.splitlines():
        sha, _, size = line.partition(" ")
        if size.isdigit():
            sizes[sha] = int(size)
    return sizes


def _head(root: Path, rel: str) -> bytes:
    """The first bytes of a worktree file, opened without following any symlink.

    The sandbox is gone by now, but the tree is still the agent's: every component is opened
    with O_NOFOLLOW relative to its parent, and only a regular file is read.
    """
    parts = PurePosixPath(rel).parts
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, flags | os.O_DIRECTORY)
    except OSError:
        return b""
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        leaf = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        os.close(fd)
        return b""
    os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(leaf).st_mode):
            return b""
        return os.read(leaf, _ELF_HEADER)
    finally:
        os.close(leaf)
