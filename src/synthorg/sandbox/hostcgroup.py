"""A run's host-work cgroup: the host git, mkfs and rsync of one run, CPU-capped and weighed low.

Beside the sandboxes' cgroups (``sandbox.cgroups`` detects the hierarchy: v1 controllers or
v2), under ``synthorg-hostwork/``: that parent keeps the weight of one ordinary process, so
all runs' host work together competes with the control plane like one more process, never
like one per child; each run's cgroup has a CPU quota (``[limits] host_work_cpu_quota``
cores). The reaper of this process holds the dir: when the process dies, everything in it is
killed and the dir removed. Where no cpu cgroup can be made (``None``), a run's host children
have only their process group and RLIMIT_CPU (``hostwork``), as ``synthorg doctor`` says.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from synthorg.reaper import tie_cgroup, untie_cgroup
from synthorg.sandbox.cgroups import CgroupMode, CgroupSupport, cgroup_label, detect_cgroups

HOST_DIR = "synthorg-hostwork"
_PERIOD_US = 100_000
_ONE_PROCESS = {False: "1024", True: "100"}  # v1 cpu.shares, v2 cpu.weight


def host_parent(support: CgroupSupport | None = None) -> tuple[Path, bool] | None:
    """Where runs' host-work cgroups go and whether it is v2; None without a cpu cgroup."""
    support = support or detect_cgroups()
    cpu = support.parents.get("cpu")
    if cpu is None:
        return None
    return cpu.parent / HOST_DIR, support.mode is CgroupMode.V2


def describe(support: CgroupSupport | None = None) -> str:
    """What confines a run's host work on this host (for ``synthorg doctor``)."""
    found = host_parent(support)
    if found is None:
        return (
            "no cpu cgroup here: a run's host children get their own process group and "
            "RLIMIT_CPU only (no CPU quota or weight against the control plane)"
        )
    return f"per-run cgroup {'v2' if found[1] else 'v1'} under {found[0]} (CPU quota, low weight)"


class HostCgroup:
    """One run's host-work cgroup (a ``hostwork.Confinement``)."""

    def __init__(self, parent: Path, v2: bool, conversation_id: str, cpu_quota: float) -> None:
        self._v2 = v2
        self._home = parent.parent  # where this process's threads are (v1 cpu)
        self._local = threading.local()  # per spawning thread: was the child forked inside
        parent.mkdir(exist_ok=True)
        if v2:  # detection enabled cpu for the parent's children; these need it too
            _write(parent / "cgroup.subtree_control", "+cpu")
        with contextlib.suppress(OSError):
            _write(parent / ("cpu.weight" if v2 else "cpu.shares"), _ONE_PROCESS[v2])
        self.path = parent / f"{cgroup_label(conversation_id)}-{secrets.token_hex(4)}"
        self.path.mkdir()
        try:
            quota = str(max(1000, int(cpu_quota * _PERIOD_US)))
            if v2:
                _write(self.path / "cpu.max", f"{quota} {_PERIOD_US}")
            else:
                _write(self.path / "cpu.cfs_period_us", str(_PERIOD_US))
                _write(self.path / "cpu.cfs_quota_us", quota)
        except OSError:
            self.path.rmdir()
            raise
        tie_cgroup(self.path)

    @property
    def describe(self) -> str:
        return f"cgroup {self.path}"

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Spawn inside: the child starts in the cgroup. Moved after its exec, a shell had
        forked before the move (its child stayed out). v1 moves one thread (``tasks``): the
        spawning thread joins for the fork and goes back. v2 moves only whole processes
        outside threaded cgroups: there the child is moved right after (``adopt``)."""
        if self._v2:
            yield
            return
        tid = str(threading.get_native_id())
        try:
            _write(self.path / "tasks", tid)
        except OSError:
            self._local.born_inside = False
            yield
            return
        self._local.born_inside = True  # read by the adopt that follows, in this thread
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                _write(self._home / "tasks", tid)

    def adopt(self, pid: int) -> None:
        if getattr(self._local, "born_inside", False):
            return  # forked inside (v1): nothing to move
        with contextlib.suppress(OSError):  # exited already (ESRCH): nothing to confine
            _write(self.path / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """The processes in it now."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def close(self) -> None:
        for _ in range(200):
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)  # killed tasks leave the cgroup as they exit
        untie_cgroup(self.path)


def confine(conversation_id: str, cpu_quota: float) -> HostCgroup | None:
    """A host-work cgroup for the run, or None where this host has no usable cpu cgroup."""
    found = host_parent()
    if found is None:
        return None
    try:
        return HostCgroup(found[0], found[1], conversation_id, cpu_quota)
    except OSError:
        return None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:  # cgroup files want one write(2)
        fh.write(value)
