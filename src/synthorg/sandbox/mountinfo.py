"""Which mounts this mount namespace holds, read from /proc/self/mountinfo.

The quota asks it what ``Path.is_mount`` cannot answer: whether an image is still mounted
anywhere (a loop device's backing file), every mount of an overlay's device, and whether a
bind of the same filesystem (the idmapped lower, idmap.py) sits at a path, where the
device comparison ``is_mount`` makes sees nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from synthorg.sandbox.mounts import backs


def mounted_from(path: Path, source: Path) -> bool:
    """True when path's top mount is a bind of source's filesystem (same device)."""
    try:
        return os.stat(path).st_dev == os.stat(source).st_dev and source.is_mount()
    except OSError:
        return False


def mounts_of(image: Path) -> list[tuple[Path, str]]:
    """(mount point, root inside the filesystem) of every mount of ``image`` in this mount
    namespace: /proc/self/mountinfo's lines on a loop device whose backing file it is."""
    lines = _mountinfo()
    # Only mounted loop devices (block major 7) are asked for their backing file (sysfs by
    # major:minor): a scan of every loop device cost ~1.5 ms on a host with a few dozen.
    mounted = {fields[2].decode() for fields in lines if fields[2].startswith(b"7:")}
    ours = {dev for dev in mounted if backs(dev, image)}
    return [
        (Path(unescape(fields[4])), unescape(fields[3]))
        for fields in lines
        if fields[2].decode() in ours
    ]


def is_mount_point(path: Path) -> bool:
    """Whether something is mounted at path, from mountinfo: ``Path.is_mount`` compares
    devices, and a bind of the same filesystem (the idmapped lower) has its parent's."""
    target = os.path.realpath(path)
    return any(unescape(fields[4]) == target for fields in _mountinfo())


def _mountinfo() -> list[list[bytes]]:
    return [line.split(b" ") for line in Path("/proc/self/mountinfo").read_bytes().splitlines()]


def mounts_on(device: str) -> list[tuple[Path, str]]:
    """(mount point, root inside the filesystem) of every mount of the device ``major:minor``."""
    return [
        (Path(unescape(fields[4])), unescape(fields[3]))
        for fields in _mountinfo()
        if fields[2].decode() == device
    ]


def unescape(field: bytes) -> str:
    """A mountinfo path: the kernel writes space, tab, newline and backslash as ``\\ooo``."""
    return os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), field))
