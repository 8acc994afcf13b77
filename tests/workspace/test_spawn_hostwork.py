"""run_collect inside a run's host work: CPU budget, its refusal after, and the run's cgroup
taking even a child that left the process group with its SIGKILLed host."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from synthorg.hostwork import HostBudget, HostWork, HostWorkExceeded, working_for
from synthorg.sandbox.hostcgroup import confine, host_parent
from synthorg.workspace.spawn import run_collect

_ENV = {"PATH": os.environ["PATH"]}
_BURN = [sys.executable, "-c", "while True: pass"]


async def test_a_child_over_the_runs_cpu_budget_is_killed_and_the_run_spawns_no_more(
    tmp_path: Path,
) -> None:
    work = HostWork(HostBudget(cpu_s=1, wall_s=120))
    with working_for(work):
        started = time.monotonic()
        with pytest.raises(HostWorkExceeded, match="host-work CPU budget"):
            await run_collect(_BURN, cwd=tmp_path, env=_ENV, stdin=None)
        assert time.monotonic() - started < 60  # the kernel's kill, not the wall budget
        with pytest.raises(HostWorkExceeded, match="host-work CPU budget"):
            await run_collect(["true"], cwd=tmp_path, env=_ENV, stdin=None)
    assert work.spent_cpu_s >= 1


async def test_a_child_past_the_wall_budget_is_killed_with_its_group(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild"
    script = f"sleep 600 & echo $! > {marker}.tmp && mv {marker}.tmp {marker}; wait"
    work = HostWork(HostBudget(cpu_s=60, wall_s=1))
    with working_for(work), pytest.raises(HostWorkExceeded, match="wall budget of 1 s"):
        await run_collect(["sh", "-c", script], cwd=tmp_path, env=_ENV, stdin=None)
    grandchild = int(marker.read_text())
    # The group's SIGKILL is sent before run_collect raises; its delivery to a process on
    # another CPU is the kernel's, so its death is waited for (bounded), not assumed.
    deadline = time.monotonic() + 30
    while not _dead(grandchild) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert _dead(grandchild)


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(host_parent() is None, reason="needs a writable cpu cgroup")
def test_the_runs_cgroup_dies_with_its_sigkilled_host_even_a_child_that_left_its_group(
    tmp_path: Path,
) -> None:
    """A host child that made its own session (setsid) is out of reach of its process group;
    the run's cgroup still holds it, and the reaper kills the cgroup with the host."""
    marker = tmp_path / "escaped"
    host_code = (
        "import asyncio, os, sys\n"
        "from pathlib import Path\n"
        "from synthorg.hostwork import HostBudget, HostWork, working_for\n"
        "from synthorg.sandbox.hostcgroup import confine\n"
        "from synthorg.workspace.spawn import run_collect\n"
        "work = HostWork(HostBudget(60, 600), confine('conv-test', 1.0))\n"
        f"script = 'setsid sleep 600 & echo $! > {marker}.tmp && mv {marker}.tmp {marker}; wait'\n"
        "async def main():\n"
        "    with working_for(work):\n"
        "        await run_collect(['sh', '-c', script], cwd=Path('.'), "
        "env={'PATH': os.environ['PATH']}, stdin=None)\n"
        "asyncio.run(main())\n"
    )
    host = subprocess.Popen([sys.executable, "-c", host_code], cwd=tmp_path)
    escaped: psutil.Process | None = None
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline and host.poll() is None, "never spawned"
            time.sleep(0.01)  # the marker file: there is nothing to wait on
        escaped = psutil.Process(int(marker.read_text()))
        assert escaped.pid != os.getpgid(escaped.pid) or escaped.pid == os.getsid(escaped.pid)
        cgroup = next(
            line.split(":", 2)[2]
            for line in Path(f"/proc/{escaped.pid}/cgroup").read_text().splitlines()
            if "synthorg-hostwork" in line
        )
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        _, alive = psutil.wait_procs([escaped], timeout=30)
        assert alive == [], "the child that left its group outlived its SIGKILLed host"
        parent = host_parent()
        assert parent is not None
        path = parent[0] / Path(cgroup).name
        deadline = time.monotonic() + 30
        while path.exists():
            assert time.monotonic() < deadline, f"{path} outlived its host"
            time.sleep(0.01)  # removed by the reaper: nothing to wait on
    finally:
        host.kill()
        host.wait()
        if escaped is not None and escaped.is_running():
            escaped.kill()


@pytest.mark.skipif(host_parent() is None, reason="needs a writable cpu cgroup")
async def test_a_runs_children_are_in_its_cgroup_with_a_cpu_quota(tmp_path: Path) -> None:
    cgroup = confine("conv-quota", 0.5)
    assert cgroup is not None
    try:
        work = HostWork(HostBudget(cpu_s=60, wall_s=60), cgroup)
        with working_for(work):
            _, out, _ = await run_collect(
                ["cat", "/proc/self/cgroup"], cwd=tmp_path, env=_ENV, stdin=None
            )
        assert cgroup.path.name in out.decode(), out
        here = Path("/proc/thread-self/cgroup").read_text()
        assert cgroup.path.name not in here, "the spawning thread stayed in the run's cgroup"
        quota = cgroup.path / "cpu.cfs_quota_us"
        if quota.exists():
            assert quota.read_text().strip() == "50000"
        else:
            assert (cgroup.path / "cpu.max").read_text().split()[0] == "50000"
    finally:
        cgroup.close()
    assert not cgroup.path.exists()
