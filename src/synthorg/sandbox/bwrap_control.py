"""A started bwrap sandbox's host-side handles: pid-1's rlimits, kill through its pidfd,
the verdicts of its cgroups, and the cleanup of what its start made (links, state, quota)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.sandbox.cgroups import RunCgroup
from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.process import Verdicts
from synthorg.sandbox.protocol import SandboxLimits
from synthorg.sandbox.quota import WorkspaceQuota
from synthorg.sandbox.views import MovedState

log = get_logger(__name__)


def apply_rlimits(pid: int, limits: SandboxLimits, missing: list[str] | None) -> None:
    """rlimits on pid-1 (inherited by everything inside, hard = soft: no raising them).

    Always: no core files (a crash must not drop a memory image into the worktree the gate
    commits) and a per-file size cap. Process and memory caps where cgroups do not cover.
    """
    resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    f = limits.file_bytes
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (f, f))
    uncovered = ["pids", "memory"] if missing is None else missing
    if "pids" in uncovered:
        n = limits.max_processes
        resource.prlimit(pid, resource.RLIMIT_NPROC, (n, n))
    if "memory" in uncovered:
        m = limits.memory_bytes
        resource.prlimit(pid, resource.RLIMIT_AS, (m, m))
    if limits.cpu_seconds is not None:
        s = limits.cpu_seconds
        resource.prlimit(pid, resource.RLIMIT_CPU, (s, s + 1))


class BwrapControl:
    """Kill via pid-1's pidfd (the kernel then kills the namespace); cgroups as the net."""

    def __init__(self, cgroup: RunCgroup | None) -> None:
        self.cgroup = cgroup
        self.pidfd: int | None = None
        self.links: Path | None = None
        self.quota: WorkspaceQuota | None = None
        self.state: MovedState | None = None

    def kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def verdicts(self) -> Verdicts:
        cg = self.cgroup
        if cg is None:
            return Verdicts()
        return Verdicts(cg.oom_killed(), cg.pids_cap_hit(), cg.peak_processes())

    def cleanup(self) -> None:
        if self.links is not None:
            shutil.rmtree(self.links, ignore_errors=True)
            self.links = None
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.cgroup is not None and not self.cgroup.remove_now():
            log.warning("sandbox.cgroup_leftover", dirs=[str(d) for d in self.cgroup.dirs.values()])
        self.cgroup = None
        if self.state is not None:
            state, self.state = self.state, None
            try:  # back before anyone (a resume, the host) looks for it
                state.restore()
            except OSError as exc:
                log.error("sandbox.state_restore_failed", dir=str(state.dir), error=str(exc))
        if self.quota is not None:
            quota, self.quota = self.quota, None
            try:  # blocking on purpose: the worktree must be whole before the gate runs
                quota.release()
            except SandboxStartError as exc:
                log.error("sandbox.quota_release_failed", dir=str(quota.dir), error=str(exc))


async def read_fd(fd: int, limit_s: float) -> bytes:
    """Read a pipe to EOF without blocking the event loop."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError as exc:
            if not done.done():
                done.set_exception(exc)
            return
        if data:
            chunks.append(data)
        elif not done.done():
            done.set_result(None)

    loop.add_reader(fd, on_readable)
    try:
        await asyncio.wait_for(done, limit_s)
    except TimeoutError as exc:
        raise SandboxStartError(f"bwrap did not report its pid within {limit_s}s") from exc
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)
