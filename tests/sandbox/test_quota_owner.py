"""A dead host's quota image is settled only by its own data dir, and its host-side children
(mkfs.ext4, rsync, git) die with it.

A host process runs a real sandbox over a worktree with a disk quota and is SIGKILLed; another
data dir's service then boots (its sandbox backend sweeps at start) and must leave the image
alone: copying it back ran the dead tenant's tree through another tenant's process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from synthorg.sandbox import BwrapSandbox
from synthorg.sandbox.quota import unavailable_reason
from synthorg.sandbox.quota_sweep import settle, stale_over, sweep_stale
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from tests.support import scripted_settings

from .helpers import sandboxes_in

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.timeout(300),
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "tests.sandbox.test_redteam_more:planned_commands"  # never asked: no run starts

HOST = """
import asyncio, os, sys
from pathlib import Path
from synthorg.sandbox import BwrapSandbox, SandboxLimits, SandboxRequest
async def main():
    req = SandboxRequest(argv=["bash", "-c", "echo written > inside.txt; echo ready; read; read"],
                         workspace=Path(sys.argv[1]), conversation_id="orphan",
                         limits=SandboxLimits(disk_bytes=int(os.environ.get("DISK", 16 << 20)),
                                             wall_timeout_s=120))
    print("STARTING", flush=True)
    if os.environ.get("FULL_COPY"):  # a pool slot's quota: mkfs -d copies the tree in
        await BwrapSandbox().start_waiting(req)
    async with BwrapSandbox().stream(req, "{}") as proc:
        async for line in proc:
            print("LINE:" + line, flush=True)
asyncio.run(main())
"""


def _settle_everything(root: Path) -> None:
    """Nothing this test made stays mounted, whatever the layout under its quota root."""
    for base in [root, *(p for p in root.iterdir() if p.is_dir())] if root.exists() else []:
        sweep_stale(base)


@pytest.fixture
def killed_host(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(data dir, worktree) of a host SIGKILLed while its sandbox ran on the quota image."""
    home, worktree = tmp_path / "tenant-a", tmp_path / "tenant-a-worktree"
    home.mkdir()
    worktree.mkdir()
    (worktree / "tracked.txt").write_text("before\n")
    env = {**os.environ, "SYNTHORG_HOME": str(home), "PYTHONPATH": str(ROOT)}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(worktree)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert host.stdout is not None
        while (out := host.stdout.readline()) and out.strip() != "LINE:ready":
            pass
        assert out.strip() == "LINE:ready"
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        deadline = time.monotonic() + 30  # its sandbox dies with it (--die-with-parent)
        while sandboxes_in(worktree):
            assert time.monotonic() < deadline, "the dead host's sandbox lives on"
            time.sleep(0.01)  # polling /proc: there is nothing to wait on
        assert worktree.is_mount()  # the dead host's image is still over the worktree
        yield home, worktree
    finally:
        host.kill()
        host.wait()
        if host.stdout is not None:
            host.stdout.close()
        _settle_everything(home.parent / "quota")


async def test_another_data_dirs_boot_leaves_a_dead_hosts_quota_alone(
    tmp_path: Path, quotas: Path, killed_host: tuple[Path, Path]
) -> None:
    home_a, worktree = killed_host
    settings = scripted_settings(
        tmp_path / "tenant-b", "tests.sandbox.test_redteam_more:planned_commands", model="m"
    )
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner):
        pass
    # Tenant B's sweep did not copy tenant A's image back (nor unmount it).
    assert worktree.is_mount(), "another data dir's boot settled this data dir's quota"
    # Tenant A's next start settles it: the tree with what the sandbox wrote, unmounted.
    BwrapSandbox(owner=home_a)
    assert not worktree.is_mount()
    assert (worktree / "inside.txt").read_text() == "written\n"
    assert (worktree / "tracked.txt").read_text() == "before\n"


def test_a_takeover_settles_the_dead_owners_quota_over_its_worktree(
    quotas: Path, killed_host: tuple[Path, Path]
) -> None:
    """Another data dir's process that takes the run over (a Temporal worker) finds the dead
    owner's quota by the worktree it inherits and settles it: the dead run's writes land."""
    _, worktree = killed_host
    (found,) = stale_over(worktree)
    assert settle(found)
    assert not worktree.is_mount()
    assert (worktree / "inside.txt").read_text() == "written\n"
    assert stale_over(worktree) == []


def _waiting(pid: int, wchans: tuple[str, ...]) -> bool:
    """Whether a thread of ``pid`` sleeps in one of these kernel functions."""
    for task in Path(f"/proc/{pid}/task").glob("*/wchan"):
        with contextlib.suppress(OSError):
            if task.read_text().startswith(wchans):
                return True
    return False


def _children_named(pid: int, name: str) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.name() == name]
    except psutil.NoSuchProcess:
        return []


def test_a_sigkilled_hosts_mkfs_dies_with_it(tmp_path: Path, quotas: Path) -> None:
    """mkfs.ext4 -d of a many-file worktree runs for seconds; the host is killed meanwhile.
    (A run's overlay makes an empty image, in milliseconds; a pool slot's full copy, as the
    quota before the overlay did, copies the tree in: that one is timed here.)"""
    worktree = tmp_path / "big"
    for d in range(40):
        sub = worktree / f"d{d}"
        sub.mkdir(parents=True)
        for i in range(500):
            (sub / f"f{i}").write_bytes(b"x")
    env = {**os.environ, "SYNTHORG_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    # Room for an inode per file: the image's inodes follow its size (mkfs -i 8192), and
    # 20,000 one-block files under a 16 MiB allowance do not fit (mkfs fails at once).
    env["DISK"], env["FULL_COPY"] = str(512 << 20), "1"
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(worktree)], stdout=subprocess.PIPE, text=True, env=env
    )
    mkfs: list[psutil.Process] = []
    try:
        assert host.stdout is not None
        assert host.stdout.readline().strip() == "STARTING"
        deadline = time.monotonic() + 60
        while not (mkfs := _children_named(host.pid, "mkfs.ext4")):
            assert time.monotonic() < deadline and host.poll() is None, "never saw mkfs run"
            time.sleep(0.005)  # polling /proc: there is nothing to wait on
        # The host ties a child right after spawning it: wait until it waits on mkfs (its
        # thread in poll), which it does only once the tie is written.
        while not _waiting(host.pid, ("poll_schedule_timeout", "do_sys_poll", "do_wait")):
            assert time.monotonic() < deadline and host.poll() is None, "the host never waited"
            time.sleep(0.005)  # polling /proc: there is nothing to wait on
        # Stopped, it cannot finish on its own: only being killed ends it.
        for proc in mkfs:
            proc.suspend()
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        _, alive = psutil.wait_procs(mkfs, timeout=30)
        assert alive == [], f"mkfs.ext4 outlived its SIGKILLed host: {alive}"
    finally:
        for proc in mkfs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        host.kill()
        host.wait()
        if host.stdout is not None:
            host.stdout.close()
        _settle_everything(quotas)
