"""Loop and bind mounts by system call: what the quota asked mount(8) and umount(8) for.

Every run's quota mounted its image (``mount -o loop``), bound it over the worktree
(``mount --bind``) and undid both (``umount`` twice): four processes per run, each a
util-linux start that parses mountinfo and, for the image, probes the filesystem type and
scans for a free loop device (~3-6 ms of CPU each). Here the same kernel calls are made
in-process: a free loop device from /dev/loop-control, attached to the image with
``LOOP_CONFIGURE`` (autoclear: the kernel detaches it when its last mount goes, as mount(8)
asks too), ``mount(2)`` with the same flags and data, ``umount2(2)``. Nothing here reads a
path the sandbox can write: the image and mount dirs are host-only, the worktree's parent
is too, and unmounting never follows a symlink at the mount point.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from pathlib import Path

from synthorg.sandbox.errors import SandboxStartError

_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LO_FLAGS_AUTOCLEAR = 4
_LO_NAME_SIZE = 64
# struct loop_config { u32 fd; u32 block_size; struct loop_info64 info; u64 reserved[8]; },
# loop_info64 = 5 x u64, 4 x u32 (lo_flags last), file name, crypt name, key, 2 x u64.
_LOOP_CONFIG = struct.Struct("=II QQQQQ IIII 64s64s32s 2Q 8Q")
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOATIME = 0x400
_MS_BIND = 0x1000
_MNT_DETACH = 0x2
_UMOUNT_NOFOLLOW = 0x8
_ATTACH_TRIES = 16  # another process may take the free device between asking and attaching

IMAGE_FLAGS = _MS_NOSUID | _MS_NODEV | _MS_NOATIME
"""mount(8)'s ``nosuid,nodev,noatime``: no set-id program or device node of the image counts."""
IMAGE_DATA = "noinit_itable"
"""ext4's own option: no background zeroing of inode tables (writes nobody asked for)."""

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mount.argtypes = [
    ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p
]  # fmt: skip
_LIBC.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _fail(what: str, path: Path | str, err: int) -> SandboxStartError:
    return SandboxStartError(f"{what} {path} failed: {os.strerror(err)} (errno {err})")


def _attach(image: Path) -> tuple[int, int]:
    """(fd, number) of a free loop device now backed by image (autoclear set)."""
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        name = os.fsencode(image)[: _LO_NAME_SIZE - 1]
        config = _LOOP_CONFIG.pack(
            backing, 0, 0, 0, 0, 0, 0, 0, 0, 0, _LO_FLAGS_AUTOCLEAR,
            name, b"", b"", 0, 0, *([0] * 8),
        )  # fmt: skip
        control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(_ATTACH_TRIES):
                number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
                device = os.open(f"/dev/loop{number}", os.O_RDWR | os.O_CLOEXEC)
                try:
                    fcntl.ioctl(device, _LOOP_CONFIGURE, config)
                except OSError as exc:
                    os.close(device)
                    if exc.errno == errno.EBUSY:
                        continue  # taken meanwhile: ask for another
                    raise
                return device, number
        finally:
            os.close(control)
        raise OSError(errno.EBUSY, "no free loop device stayed free")
    finally:
        os.close(backing)  # the loop device holds its own reference


def attached_devices(image: Path) -> list[str]:
    """The loop devices (``loopN``) backed by image now, from sysfs."""
    target = os.path.realpath(image)
    found = []
    for block in Path("/sys/block").glob("loop*"):
        try:
            if (block / "loop" / "backing_file").read_text().rstrip("\n") == target:
                found.append(block.name)
        except OSError:  # not attached, or detached meanwhile
            continue
    return found


def backs(device: str, image: Path) -> bool:
    """Whether the block device ``major:minor`` is a loop device backed by image."""
    try:
        backing = Path(f"/sys/dev/block/{device}/loop/backing_file").read_text()
    except OSError:  # not a loop device, or detached meanwhile
        return False
    return backing.rstrip("\n") == os.path.realpath(image)


def mount_image(image: Path, target: Path, *, fresh: bool = False) -> None:
    """Mount the ext4 image at target through a loop device: ``mount -o loop,nosuid,nodev,
    noatime,noinit_itable image target``. The device detaches itself at the last unmount.

    An image still attached (mounted elsewhere: a sweep's remount) is mounted from that
    device, as mount(8) reuses it: the kernel then shares the one filesystem, where a second
    device would mount the same ext4 twice. ``fresh``: the caller just made the image.
    """
    attached = [] if fresh else attached_devices(image)
    device = None
    if attached:
        source = f"/dev/{attached[0]}"
    else:
        try:
            device, number = _attach(image)
        except OSError as exc:
            raise SandboxStartError(f"attaching {image} to a loop device failed: {exc}") from exc
        source = f"/dev/loop{number}"
    try:
        flags, data = IMAGE_FLAGS, IMAGE_DATA.encode()
        if _LIBC.mount(os.fsencode(source), os.fsencode(target), b"ext4", flags, data) != 0:
            raise _fail("mounting", image, ctypes.get_errno())
    finally:
        if device is not None:
            os.close(device)  # mounted: the mount holds it; failed: autoclear detaches it


def bind(source: Path, target: Path) -> None:
    """``mount --bind source target`` (the bind keeps the source mount's nosuid/nodev)."""
    if _LIBC.mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND, None) != 0:
        raise _fail(f"binding {source} over", target, ctypes.get_errno())


def unmount(target: Path, *, lazy: bool = False) -> None:
    """``umount target`` (``-l`` with lazy), never following a symlink at target."""
    flags = _UMOUNT_NOFOLLOW | (_MNT_DETACH if lazy else 0)
    if _LIBC.umount2(os.fsencode(target), flags) != 0:
        raise _fail("unmounting", target, ctypes.get_errno())


OVERLAY_DATA = "redirect_dir=nofollow,metacopy=off,index=off,xino=off"
"""No redirect or metacopy xattr is ever made or followed (a dir rename is EXDEV, tools copy),
no index: every upper entry is what it looks like (upper.py reads the upper as plain files)."""


def mount_overlay(lower: Path, upper: Path, work: Path, target: Path) -> None:
    """``mount -t overlay -o lowerdir=lower,upperdir=upper,workdir=work,nosuid,nodev,noatime``.

    The layers are named through /proc/self/fd (the kernel resolves the magic links at mount
    time), so no path needs escaping for the option string (a ``,`` or ``:`` in a worktree's
    name). ``lower`` is resolved before ``target`` is mounted: lower may be a path target's
    mount (or a later bind of it) covers.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    fds = [os.open(path, flags) for path in (lower, upper, work)]
    try:
        lower_fd, upper_fd, work_fd = (f"/proc/self/fd/{fd}" for fd in fds)
        data = f"lowerdir={lower_fd},upperdir={upper_fd},workdir={work_fd},{OVERLAY_DATA}"
        if _LIBC.mount(b"overlay", os.fsencode(target), b"overlay", IMAGE_FLAGS,
                       data.encode()) != 0:  # fmt: skip
            raise _fail("mounting an overlay at", target, ctypes.get_errno())
    finally:
        for fd in fds:
            os.close(fd)
