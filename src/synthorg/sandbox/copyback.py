"""The quota's copy-back of what a run changed, in-process when every change is a plain one.

rsync (``-a -H --checksum --sparse --delete``, see quota.py) is the general copy-back: it
deletes, follows renames, keeps hard links and holes. A run's usual changes are simpler:
files edited or added, directories added (``__pycache__``). For those rsync costs three
processes (its sender, receiver and generator) and ~10-30 ms of CPU per run, more than the
copying. Here those changes are copied by the host process itself, with the outcome rsync
gives: content, mode without set-id bits or world write (``--chmod=ug-s,o-w``), owner and
mtime. Anything else (a deletion or rename, a symlink, a special file, a hard link, a sparse
file, a worktree entry of another type) leaves the whole list to rsync, as before.

The image is the sandbox's (it has ended by now); the worktree's files came from the
repository. Neither is trusted: every path is opened one component at a time relative to
its parent, never following a symlink, and only regular files and directories are touched.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from synthorg.sandbox.identity import host_owner

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
STRIP = stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH  # --chmod=ug-s,o-w
_COMPARE_MAX = 1 << 20  # same size: compare content up to this, else rewrite
_CHUNK = 1 << 20
#: More changes than this go to rsync: past a few hundred files its one pass beats a
#: Python open/copy per file, and the processes it costs no longer matter.
_MOST = 500


class _NotSimple(Exception):
    """A change only rsync copies back faithfully."""


def open_dir(root: int, rel: str) -> int:
    """A dir fd for rel under the dir fd root, no component a symlink (``.`` is root)."""
    fd = os.dup(root)
    for part in () if rel == "." else rel.split("/"):
        try:
            next_fd = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = next_fd
    return fd


def _lstat(root: int, parent: str, name: str) -> os.stat_result:
    """lstat of parent/name under the dir fd root, no parent component a symlink."""
    fd = open_dir(root, parent)
    try:
        return os.lstat(name, dir_fd=fd)
    finally:
        os.close(fd)


def _plain(st: os.stat_result) -> bool:
    """A regular file rsync would copy as it is: one name, no holes."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_blocks * 512 >= st.st_size


def _depth(entry: str) -> int:
    """Sorts a directory (``dir/.``) before everything in it."""
    return entry.removesuffix("/.").count("/") + (0 if entry.endswith("/.") else 1)


def _plan(src: int, dst: int, changed: list[str]) -> list[tuple[str, bool]]:
    """(path, is_dir) to copy, parents first; _NotSimple when rsync must do it."""
    todo: list[tuple[str, bool]] = []
    made: set[str] = set()  # dirs the copy will create
    for entry in sorted(changed, key=_depth):
        is_dir = entry.endswith("/.")
        rel = entry[:-2] if is_dir else entry
        parent, _, name = rel.rpartition("/")
        parent = parent or "."
        src_st = _lstat(src, parent, name) if rel != "." else os.fstat(src)
        if is_dir != stat.S_ISDIR(src_st.st_mode) or not (is_dir or _plain(src_st)):
            raise _NotSimple(rel)
        if rel == ".":
            there: os.stat_result | None = os.fstat(dst)
        elif parent in made:
            there = None
        else:
            try:
                there = _lstat(dst, parent, name)
            except FileNotFoundError:
                there = None
        if there is not None and stat.S_IFMT(there.st_mode) != stat.S_IFMT(src_st.st_mode):
            raise _NotSimple(rel)  # replaced by another type of entry
        if is_dir:
            if there is None:
                made.add(rel)
            elif not _only_additions(src, dst, rel):
                raise _NotSimple(rel)  # --delete's work
        todo.append((rel, is_dir))
    return todo


def _only_additions(src: int, dst: int, rel: str) -> bool:
    """Whether every entry of the worktree's dir is still in the image's dir."""
    src_fd, dst_fd = open_dir(src, rel), open_dir(dst, rel)
    try:
        return set(os.listdir(dst_fd)) <= set(os.listdir(src_fd))
    finally:
        os.close(src_fd)
        os.close(dst_fd)


def _same_content(a: int, b: int, size: int) -> bool:
    if size > _COMPARE_MAX or os.fstat(b).st_size != size:
        return False
    return os.pread(a, size + 1, 0) == os.pread(b, size + 1, 0)


def _attributes(fd: int, st: os.stat_result) -> None:
    os.fchown(fd, *host_owner())  # as rsync --no-owner: what lands is the host's
    os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~STRIP)


def _copy_file(src: int, dst: int, rel: str) -> None:
    parent, _, name = rel.rpartition("/")
    src_dir, dst_dir = open_dir(src, parent or "."), open_dir(dst, parent or ".")
    try:
        source = os.open(name, _READ, dir_fd=src_dir)
        try:
            st = os.fstat(source)
            if not _plain(st):
                raise _NotSimple(rel)
            # st_blocks also counts an xattr block ext4 shares among files: a file of holes
            # can pass _plain. A hole before EOF is --sparse's work.
            if st.st_size and os.lseek(source, 0, os.SEEK_HOLE) < st.st_size:
                raise _NotSimple(rel)
            try:
                existing = os.open(name, _READ, dir_fd=dst_dir)
            except FileNotFoundError:
                existing = None
            if existing is not None:
                try:
                    if stat.S_ISREG(os.fstat(existing).st_mode) and _same_content(
                        source, existing, st.st_size
                    ):  # --checksum: the content stays, the attributes are the image's
                        _attributes(existing, st)
                        os.utime(existing, ns=(st.st_atime_ns, st.st_mtime_ns))
                        return
                finally:
                    os.close(existing)
            tmp = f".{name}.{secrets.token_hex(4)}"
            out = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600, dir_fd=dst_dir,
            )  # fmt: skip
            try:
                offset = 0
                while offset < st.st_size:
                    sent = os.sendfile(out, source, offset, min(_CHUNK, st.st_size - offset))
                    if sent == 0:
                        break
                    offset += sent
                _attributes(out, st)
                os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
            except BaseException:
                os.close(out)
                os.unlink(tmp, dir_fd=dst_dir)
                raise
            os.close(out)
            os.rename(tmp, name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
        finally:
            os.close(source)
    finally:
        os.close(src_dir)
        os.close(dst_dir)


def _make_dir(dst: int, rel: str) -> None:
    """rel in the worktree: made (0700 until its attributes are set), or there already."""
    if rel == ".":
        return
    parent, _, name = rel.rpartition("/")
    dst_parent = open_dir(dst, parent or ".")
    try:
        os.mkdir(name, 0o700, dir_fd=dst_parent)
    except FileExistsError:
        pass  # a directory: the plan checked its type (and _dir_attributes opens it so)
    finally:
        os.close(dst_parent)


def _dir_attributes(src: int, dst: int, rel: str) -> None:
    src_fd, dst_fd = open_dir(src, rel), open_dir(dst, rel)
    try:
        st = os.fstat(src_fd)
        _attributes(dst_fd, st)
        os.utime(dst_fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(src_fd)
        os.close(dst_fd)


def copy_back_plain(image: Path, worktree: Path, changed: list[str]) -> bool:
    """Copy the listed changes (quota._changed's entries) from image onto worktree; False
    when one of them is not plain, or a copy failed: then rsync must copy the whole list
    (which also repairs anything copied here before the failure)."""
    if len(changed) > _MOST:
        return False
    try:
        src = os.open(image, _DIR)
    except OSError:
        return False
    try:
        dst = os.open(worktree, _DIR)
    except OSError:
        os.close(src)
        return False
    try:
        todo = _plan(src, dst, changed)
        for rel, is_dir in todo:
            if is_dir:
                _make_dir(dst, rel)
            else:
                _copy_file(src, dst, rel)
        for rel, is_dir in reversed(todo):  # a dir's mtime once its entries are in
            if is_dir:
                _dir_attributes(src, dst, rel)
    except (OSError, _NotSimple):
        return False
    finally:
        os.close(src)
        os.close(dst)
    return True
