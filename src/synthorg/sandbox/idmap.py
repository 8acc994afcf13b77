"""The worktree as the sandbox user sees it: an idmapped mount, not a chown of every file.

Run as root, a sandbox runs as its own host user (identity.py), and the host's worktree
belongs to root. Handing the tree over by chown (``identity.grant_tree``) stats every entry
at every start: 6.7 s on 100,000 files under load, the one start cost left that grew with
the repository once the quota became an overlay (quota.py). An idmapped mount
(``mount_setattr(MOUNT_ATTR_IDMAP)``, Linux 5.12; as an overlay's lower layer, 5.19) shows
the same inodes with the host owner's ids mapped to the sandbox user's, at no cost per
file: the overlay's lower layer is such a clone of the worktree, so the sandbox owns what it
reads and its copy-ups, while nothing on the host changes owner. What it writes lands back
as the host's (upper.py, copyback.py: ``host_owner``).

The mapping comes from a user namespace made once per process and identity (a child
``unshare --user`` whose uid/gid maps this process writes, then lets exit: the namespace
lives on in the fd). Only the host owner's ids are mapped; an entry owned by anyone else
shows as the overflow id (65534) and is read by its "other" bits, as it would be by any
non-owner. None of this reads a path the sandbox can write: the clone is made of the host
worktree before the sandbox starts, into a host-only quota dir.
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import threading
from pathlib import Path

from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.identity import host_owner

_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442  # the same numbers on every architecture (generic syscall table)
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_IDMAP = 0x00100000
#: struct mount_attr { u64 attr_set; u64 attr_clr; u64 propagation; u64 userns_fd; }
_MOUNT_ATTR = struct.Struct("=QQQQ")

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


class IdmapUnsupported(SandboxStartError):
    """This kernel or filesystem cannot make an idmapped mount (the caller chowns instead)."""


_NAMESPACES: dict[tuple[int, int, int, int], int] = {}
_NAMESPACES_LOCK = threading.Lock()


def _userns(host: tuple[int, int], sandbox: tuple[int, int]) -> int:
    """An fd of a user namespace mapping the host owner's uid/gid to the sandbox's (cached)."""
    key = (*host, *sandbox)
    with _NAMESPACES_LOCK:
        fd = _NAMESPACES.get(key)
        if fd is not None:
            return fd
        fd = _make_userns(host, sandbox)
        _NAMESPACES[key] = fd
        return fd


def _make_userns(host: tuple[int, int], sandbox: tuple[int, int]) -> int:
    # A child, not fork(): this process has threads. It says when it has unshared, then
    # waits on stdin until its maps are written and its namespace is held by our fd.
    try:
        child = subprocess.Popen(
            ["unshare", "--user", "--", "sh", "-c", "echo; exec cat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
        )
    except OSError as exc:  # no unshare(1) (util-linux)
        raise IdmapUnsupported(f"cannot start unshare --user: {exc}") from exc
    assert child.stdin is not None and child.stdout is not None
    try:
        if child.stdout.readline() != b"\n":
            raise IdmapUnsupported("unshare --user did not start a user namespace")
        proc = Path(f"/proc/{child.pid}")
        # ns id (the on-disk owner) -> "host" id (what the mount shows): 0 -> sandbox user
        (proc / "uid_map").write_text(f"{host[0]} {sandbox[0]} 1\n")
        (proc / "setgroups").write_text("deny")
        (proc / "gid_map").write_text(f"{host[1]} {sandbox[1]} 1\n")
        return os.open(proc / "ns" / "user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise IdmapUnsupported(f"cannot make the idmap's user namespace: {exc}") from exc
    finally:
        child.stdin.close()
        child.wait()
        child.stdout.close()
        if child.stderr is not None:
            child.stderr.close()


def _syscall(number: int, *args: object) -> int:
    result = int(_LIBC.syscall(number, *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def bind_idmapped(source: Path, target: Path, sandbox: tuple[int, int]) -> None:
    """Mount a clone of ``source`` (its mount at that dentry, not its submounts) at
    ``target`` with the host owner's ids shown as ``sandbox``'s (uid, gid).

    IdmapUnsupported, with nothing mounted, where the kernel or the filesystem cannot.
    """
    userns = _userns(host_owner(), sandbox)
    flags = _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC
    try:
        tree = _syscall(_SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(source), flags)
    except OSError as exc:
        raise IdmapUnsupported(f"open_tree({source}) failed: {exc}") from exc
    try:
        attr = ctypes.create_string_buffer(
            _MOUNT_ATTR.pack(_MOUNT_ATTR_IDMAP, 0, 0, userns), _MOUNT_ATTR.size
        )
        try:
            _syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, attr,
                     ctypes.c_size_t(_MOUNT_ATTR.size))  # fmt: skip
        except OSError as exc:  # EINVAL: no FS_ALLOW_IDMAP here; ENOSYS: kernel < 5.12
            raise IdmapUnsupported(f"an idmapped mount of {source} failed: {exc}") from exc
        try:
            _syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(target),
                     _MOVE_MOUNT_F_EMPTY_PATH)  # fmt: skip
        except OSError as exc:
            raise SandboxStartError(f"attaching the idmapped {source} at {target}: {exc}") from exc
    finally:
        os.close(tree)  # a clone never attached is unmounted with its last fd
