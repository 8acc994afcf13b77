"""Detect cgroup support (v1 / v2 / none) and manage one run's cgroups."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from synthorg.sandbox.protocol import SandboxLimits

CONTROLLERS = ("pids", "memory", "cpu")
_CPU_PERIOD_US = 100_000
#: Scheduler weight of one ordinary process (v1 cpu.shares, v2 cpu.weight) and the most the
#: kernel accepts for a group.
_ONE_TASK = {False: 1024, True: 100}
_MOST = {False: 262_144, True: 10_000}
RUN_PREFIX = "sb-"
#: An operator may point v2 at a delegated cgroup (e.g. a systemd unit's Delegate=yes slice).
PARENT_ENV = "SYNTHORG_SANDBOX_CGROUP"


class CgroupMode(StrEnum):
    """Which cgroup hierarchy the sandbox can use on this host."""

    V1 = "v1"
    V2 = "v2"
    NONE = "none"


@dataclass(frozen=True)
class CgroupSupport:
    """What this host lets us do: mode, and per controller the dir we create run cgroups in."""

    mode: CgroupMode
    parents: dict[str, Path] = field(default_factory=dict)
    detail: str = ""

    @property
    def missing(self) -> list[str]:
        """Controllers we cannot use here (limits fall back to rlimits)."""
        return [c for c in CONTROLLERS if c not in self.parents]


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fstype, super options) of every mount of this process."""
    rows = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) >= 5 and len(rparts) >= 3:
            rows.append((parts[3], parts[4], rparts[0], rparts[2]))
    return rows


def _own_paths() -> dict[str, str]:
    """Our own cgroup path per v1 controller, and under key '' the v2 path."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for ctrl in ctrls.split(",") if ctrls else [""]:
            paths[ctrl] = path
    return paths


def _join(mount_point: str, mount_root: str, own: str) -> Path:
    rel = own[len(mount_root) :] if own.startswith(mount_root) and mount_root != "/" else own
    return Path(mount_point) / rel.lstrip("/")


def _detect_v1(mounts: list[tuple[str, str, str, str]], own: dict[str, str]) -> dict[str, Path]:
    parents: dict[str, Path] = {}
    for root, point, fstype, opts in mounts:
        if fstype != "cgroup":
            continue
        for ctrl in CONTROLLERS:
            if ctrl in opts.split(",") and ctrl in own and ctrl not in parents:
                base = _join(point, root, own[ctrl])
                if base.is_dir() and os.access(base, os.W_OK):
                    parents[ctrl] = base / "synthorg-sandbox"
    return parents


def _detect_v2(mounts: list[tuple[str, str, str, str]], own: dict[str, str]) -> Path | None:
    """A v2 dir whose children may get pids/memory/cpu, or None."""
    explicit = os.environ.get(PARENT_ENV)
    for root, point, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        base = Path(explicit) if explicit else _join(point, root, own[""])
        try:
            available = set((base / "cgroup.controllers").read_text().split())
            enabled = set((base / "cgroup.subtree_control").read_text().split())
        except OSError:
            return None
        if not set(CONTROLLERS) <= available:
            return None
        # A cgroup holding processes cannot enable controllers for children (the
        # "no internal processes" rule) unless it is the root: try, and accept refusal.
        if not set(CONTROLLERS) <= enabled:
            try:
                (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
            except OSError:
                return None
        return base / "synthorg-sandbox"
    return None


@functools.cache
def detect_cgroups() -> CgroupSupport:
    """What cgroup support this host gives the sandbox (cached per process)."""
    try:
        mounts, own = _mounts(), _own_paths()
    except OSError as exc:
        return CgroupSupport(CgroupMode.NONE, detail=f"cannot read /proc: {exc}")
    v1 = _detect_v1(mounts, own)
    if len(v1) == len(CONTROLLERS):
        return CgroupSupport(CgroupMode.V1, v1, f"cgroup v1 ({', '.join(v1)}) writable")
    v2 = _detect_v2(mounts, own)
    if v2 is not None:
        return CgroupSupport(
            CgroupMode.V2, dict.fromkeys(CONTROLLERS, v2), f"cgroup v2 under {v2.parent}"
        )
    if v1:
        return CgroupSupport(CgroupMode.V1, v1, f"cgroup v1 partial ({', '.join(v1)}) writable")
    return CgroupSupport(CgroupMode.NONE, detail="no writable cgroup hierarchy with controllers")


def _read_counter(path: Path, key: str) -> int:
    """Value of `key N` in a flat-keyed cgroup file, 0 when absent."""
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    return 0


def cgroup_label(conversation_id: str) -> str:
    """The name prefix of a run's cgroups: a digest, since the sandbox reads its own cgroup
    path in /proc/self/cgroup and must not learn the conversation id from it."""
    return RUN_PREFIX + hashlib.blake2b(conversation_id.encode(), digest_size=6).hexdigest()


class RunCgroup:
    """The cgroups of one sandboxed run: create with limits, attach, read verdicts, remove."""

    def __init__(self, support: CgroupSupport, conversation_id: str, limits: SandboxLimits):
        self._support = support
        self._name = f"{cgroup_label(conversation_id)}-{secrets.token_hex(4)}"
        self.dirs: dict[str, Path] = {}
        try:
            for ctrl, parent in support.parents.items():
                path = parent / self._name
                if path in self.dirs.values():  # v2: one dir serves every controller
                    self.dirs[ctrl] = path
                    continue
                parent.mkdir(exist_ok=True)
                if support.mode is CgroupMode.V2:
                    _write(parent / "cgroup.subtree_control", "+pids +memory +cpu")
                path.mkdir()
                self.dirs[ctrl] = path
            self._apply(limits)
        except OSError:
            self.remove_now()
            raise
        self._weigh_parent()

    @property
    def v2(self) -> bool:
        return self._support.mode is CgroupMode.V2

    def _apply(self, limits: SandboxLimits) -> None:
        quota = int(limits.cpu_quota * _CPU_PERIOD_US)
        if "pids" in self.dirs:
            _write(self.dirs["pids"] / "pids.max", str(limits.max_processes))
        if "memory" in self.dirs:
            mem = self.dirs["memory"]
            if self.v2:
                _write(mem / "memory.max", str(limits.memory_bytes))
                with contextlib.suppress(OSError):  # no swap accounting on this kernel
                    _write(mem / "memory.swap.max", "0")
            else:
                _write(mem / "memory.limit_in_bytes", str(limits.memory_bytes))
                with contextlib.suppress(OSError):  # memsw exists only with swap accounting
                    _write(mem / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        if "cpu" in self.dirs:
            cpu = self.dirs["cpu"]
            if self.v2:
                _write(cpu / "cpu.max", f"{quota} {_CPU_PERIOD_US}")
            else:
                _write(cpu / "cpu.cfs_period_us", str(_CPU_PERIOD_US))
                _write(cpu / "cpu.cfs_quota_us", str(quota))

    def _weigh_parent(self) -> None:
        """Give the parent of every run's cpu cgroup the weight of one ordinary process per
        live run. Every run cgroup sits under one parent, and the kernel weighs that parent
        like a single process against the host's others: with its default weight all the
        sandboxes together got one process's share of a busy host (32 runs' commands queued
        behind every other runnable task). Each run now weighs what one host process does,
        however many processes it forks; its cpu quota still caps it."""
        cpu = self.dirs.get("cpu")
        if cpu is not None:
            weigh_runs(cpu.parent, self.v2)

    def attach(self, pid: int) -> None:
        """Move pid into every run cgroup (its future children follow)."""
        for path in dict.fromkeys(self.dirs.values()):
            _write(path / "cgroup.procs", str(pid))

    def oom_killed(self) -> bool:
        """True when the kernel killed a process for exceeding the memory cap."""
        mem = self.dirs.get("memory")
        if mem is None:
            return False
        if self.v2:
            return _read_counter(mem / "memory.events", "oom_kill") > 0
        return _read_counter(mem / "memory.oom_control", "oom_kill") > 0

    def pids_cap_hit(self) -> bool:
        """True when a fork/clone was refused because of the process cap."""
        pids = self.dirs.get("pids")
        return pids is not None and _read_counter(pids / "pids.events", "max") > 0

    def peak_processes(self) -> int | None:
        """Most processes seen at once (pids.peak), when the kernel reports it."""
        pids = self.dirs.get("pids")
        if pids is None:
            return None
        try:
            return int((pids / "pids.peak").read_text())
        except (OSError, ValueError):
            return None

    def kill_all(self) -> None:
        """SIGKILL every process still in the run's cgroups (belt to pid-1's braces)."""
        for path in dict.fromkeys(self.dirs.values()):
            if self.v2:
                with contextlib.suppress(OSError):
                    _write(path / "cgroup.kill", "1")
                continue
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)

    def remove_now(self, attempts: int = 50) -> bool:
        """rmdir every run cgroup, retrying briefly while exiting tasks drain."""
        for path in list(dict.fromkeys(self.dirs.values()))[::-1]:
            for _ in range(attempts):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill_all()
                    time.sleep(0.01)
        gone = all(not p.exists() for p in self.dirs.values())
        self._weigh_parent()
        return gone


def weigh_runs(parent: Path, v2: bool) -> None:
    """Set parent's cpu weight to one process's per run cgroup under it (at least one's).
    Every host process sharing the parent recounts on each start and stop, so a racing
    writer's stale count lasts until the next one."""
    with contextlib.suppress(OSError):  # a weight we cannot set leaves the kernel's default
        runs = sum(1 for p in parent.iterdir() if p.name.startswith(RUN_PREFIX) and p.is_dir())
        weight = min(max(runs, 1) * _ONE_TASK[v2], _MOST[v2])
        _write(parent / ("cpu.weight" if v2 else "cpu.shares"), str(weight))


def sweep_stale(support: CgroupSupport, older_than_s: float = 120.0, prefix: str = "") -> int:
    """Remove empty run cgroups left by hosts that died (SIGKILL skips their cleanup).

    Only dirs older than older_than_s are touched: a starting run attaches its pid-1 within
    milliseconds of creating its cgroup, and rmdir refuses a cgroup that has processes.
    """
    removed, now = 0, time.time()
    for parent in dict.fromkeys(support.parents.values()):
        with contextlib.suppress(OSError):
            for path in parent.iterdir():
                with contextlib.suppress(OSError):
                    old = now - path.stat().st_mtime >= older_than_s
                    if path.is_dir() and path.name.startswith(prefix) and old:
                        path.rmdir()
                        removed += 1
    if removed and "cpu" in support.parents:
        weigh_runs(support.parents["cpu"], support.mode is CgroupMode.V2)
    return removed


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:  # cgroup files want one write(2), no truncate games
        fh.write(value)
