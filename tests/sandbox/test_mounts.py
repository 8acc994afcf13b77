"""Loop and bind mounts by system call (mounts.py): the quota's mounts, as mount(8) made them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.mounts import attached_devices, backs, bind, mount_image, unmount
from synthorg.sandbox.quota import unavailable_reason

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"quotas unavailable: {unavailable_reason()}"
)


def _options(point: Path) -> tuple[str, str, str]:
    """(source, per-mount options, filesystem type) of point's top mount (mountinfo)."""
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(point):
            sep = fields.index("-")
            found = (fields[sep + 2], fields[5], fields[sep + 1])
    assert found is not None, f"{point} is not mounted"
    return found


def _detached(image: Path) -> bool:
    """Whether image's loop device is gone (the kernel may finish the detach just after)."""
    deadline = time.monotonic() + 10
    while attached_devices(image) and time.monotonic() < deadline:
        time.sleep(0.01)
    return attached_devices(image) == []


def _image(tmp_path: Path) -> Path:
    image = tmp_path / "fs.img"
    with open(image, "wb") as fh:
        fh.truncate(16 * 1024**2)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image)], check=True)
    return image


def test_an_image_is_mounted_as_mount_o_loop_made_it_and_detaches_when_unmounted(
    tmp_path: Path,
) -> None:
    image, mnt, over = _image(tmp_path), tmp_path / "mnt", tmp_path / "worktree"
    mnt.mkdir()
    over.mkdir()
    mount_image(image, mnt)
    try:
        source, options, fstype = _options(mnt)
        assert fstype == "ext4" and source.startswith("/dev/loop")
        assert {"nosuid", "nodev", "noatime"} <= set(options.split(","))
        assert [f"/dev/{d}" for d in attached_devices(image)] == [source]
        dev = os.stat(mnt).st_dev
        assert backs(f"{os.major(dev)}:{os.minor(dev)}", image)
        assert not backs(f"{os.major(dev)}:{os.minor(dev)}", tmp_path / "other.img")
        (mnt / "written").write_text("x")
        bind(mnt, over)
        try:
            assert (over / "written").read_text() == "x"
            assert {"nosuid", "nodev"} <= set(_options(over)[1].split(","))
            # A second mount of the attached image shares its device (one filesystem).
            again = tmp_path / "again"
            again.mkdir()
            mount_image(image, again)
            assert _options(again)[0] == source and (again / "written").exists()
            unmount(again)
        finally:
            unmount(over)
    finally:
        unmount(mnt)
    assert not mnt.is_mount() and _detached(image)


def test_failures_say_what_failed_and_leave_no_device_behind(tmp_path: Path) -> None:
    not_ext4 = tmp_path / "zeros.img"
    with open(not_ext4, "wb") as fh:
        fh.truncate(16 * 1024**2)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with pytest.raises(SandboxStartError, match="mounting"):
        mount_image(not_ext4, mnt)
    assert _detached(not_ext4)  # autoclear: the failed mount's device went
    with pytest.raises(SandboxStartError, match="unmounting"):
        unmount(mnt)
    link = tmp_path / "link"
    link.symlink_to(mnt)
    image = _image(tmp_path)
    mount_image(image, mnt)
    try:
        with pytest.raises(SandboxStartError):
            unmount(link)  # a symlink at the mount point is never followed
        assert mnt.is_mount()
    finally:
        unmount(mnt)
    assert os.listdir(mnt) == []
