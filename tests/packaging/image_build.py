"""The image test's build, started in the background as soon as the suite is collected.

A build is minutes of downloads and installs that wait on the network and the disk more than
on the CPU: started early (at low CPU and IO priority, so the tests before it keep their
share), it is done or nearly so when tests/packaging/test_image.py asks for the image; if not,
it gets its normal priority back for the rest. Its work dir (GBs of vfs layers, ~50 s to
delete on a busy machine) is deleted the same way, in the background, awaited at session end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TAG = "localhost/synthorg:test"
# The debootstrapped base rootfs (a cold one is the Debian download) is shared by every run on
# this machine; build_image.sh locks it. What each build makes (buildah's storage with the
# base image, the image and its containers) is in a work dir of its own, removed afterwards:
# two runs side by side share no tag, container or prune.
CACHE = Path(os.environ.get("SYNTHORG_IMAGE_CACHE", "/var/tmp/synthorg-image-cache"))
BUILD_S = 3000.0
TOOLS = ("buildah", "debootstrap", "strip", "runc")
_LOW = ("nice", "-n", "10", "ionice", "-c", "2", "-n", "7")  # what the tests leave over


def wanted() -> bool:
    """Whether the image tests run here (see test_image's skip) and can build at all."""
    asked = bool(os.environ.get("CI")) or os.environ.get("SYNTHORG_TEST_IMAGE") == "1"
    return asked and os.geteuid() == 0 and all(shutil.which(tool) for tool in TOOLS)


def buildah(work: Path, *args: str) -> list[str]:
    return [
        "buildah", "--storage-driver", "vfs",
        "--root", str(work / "storage"), "--runroot", str(work / "run"), *args,
    ]  # fmt: skip


def _mounts_under(root: Path) -> list[str]:
    prefix = f"{root}/"
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]


class ImageBuild:
    """scripts/build_image.sh in a fresh work dir; one per test session."""

    def __init__(self) -> None:
        self.work: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self._removals: list[subprocess.Popen[bytes]] = []

    def start(self) -> Path:
        """Start the build unless it is started; its work dir (on disk: vfs storage holds
        every layer whole)."""
        if self.work is None:
            self.work = Path(tempfile.mkdtemp(prefix="synthorg-image-", dir="/var/tmp"))
            env = {**os.environ, "SYNTHORG_IMAGE_WORK": str(self.work)}
            env["SYNTHORG_IMAGE_CACHE"] = str(CACHE)
            with (self.work / "build.log").open("wb") as log:
                self._started = time.monotonic()
                self._proc = subprocess.Popen(
                    [*_LOW, "bash", str(REPO / "scripts" / "build_image.sh"), TAG],
                    cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
        return self.work

    def wait(self) -> str:
        """The built image's tag, once the build ends; its log's tail if it failed."""
        work = self.start()
        assert self._proc is not None
        if self._proc.poll() is None:  # a test waits for it now: no longer in the background
            with contextlib.suppress(OSError):  # raising a priority needs root (the test does)
                os.setpriority(os.PRIO_PGRP, self._proc.pid, 0)
            subprocess.run(["ionice", "-c", "2", "-n", "4", "-P", str(self._proc.pid)], check=False)
        left = BUILD_S - (time.monotonic() - self._started)
        try:
            code = self._proc.wait(max(left, 1.0))
        except subprocess.TimeoutExpired:
            self._kill()
            raise AssertionError(f"image build not done in {BUILD_S:.0f} s") from None
        tail = (work / "build.log").read_text(errors="replace")[-6000:]
        assert code == 0, f"build_image.sh exited {code}:\n{tail}"
        print(f"image build: {time.monotonic() - self._started:.0f} s after its start")
        return TAG

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)  # build_image.sh and what it started
            self._proc.wait()

    def remove(self) -> None:
        """Stop the build if it still runs, remove its containers; its work dir is deleted
        in the background (``wait_removed``)."""
        if self.work is None:
            return
        work, self.work = self.work, None
        self._kill()
        subprocess.run(buildah(work, "rm", "--all"), capture_output=True, check=False)
        for mount in reversed(_mounts_under(work)):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        left = _mounts_under(work)
        assert not left, f"still mounted, {work} kept: {left}"  # never delete through a mount
        removal = subprocess.Popen(
            [*_LOW, "rm", "-rf", str(work)], stdin=subprocess.DEVNULL, start_new_session=True
        )
        self._removals.append(removal)

    def wait_removed(self) -> None:
        """Until every work dir this session made is gone."""
        for removal in self._removals:
            assert removal.wait() == 0, f"rm -rf exited {removal.returncode}"
        self._removals.clear()


BUILD = ImageBuild()
"""This session's build."""
