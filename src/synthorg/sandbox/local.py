"""The local backend: the same request shape with NO isolation, only on explicit opt-in."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.sandbox.boundary import local_boundary
from synthorg.sandbox.bwrap import host_python, host_python_dir
from synthorg.sandbox.errors import SandboxIOError, SandboxOptInError, SandboxStartError
from synthorg.sandbox.process import (
    STREAM_LIMIT,
    ManagedProcess,
    Verdicts,
    start_uncancellable,
)
from synthorg.sandbox.protocol import BoundaryDeclaration, SandboxProcess, SandboxRequest

log = get_logger(__name__)

_PACKAGE_DIR = Path(__file__).resolve().parent
WARNING = (
    "LOCAL SANDBOX BACKEND: NO ISOLATION. The agent's commands run as this user on this host "
    "with full filesystem, network and process access; no resource caps besides timeouts."
)


class LocalSandbox:
    """SandboxStreamer without isolation: for hosts with no bubblewrap, by explicit choice."""

    name = "local"

    def __init__(self, *, allow_unisolated: bool = False) -> None:
        if allow_unisolated is not True:
            raise SandboxOptInError(
                "the local sandbox backend has no isolation: opt in explicitly "
                "([sandbox] allow_local = true, or --allow-local) or install bubblewrap"
            )
        log.warning("sandbox.local_backend", warning=WARNING)

    def boundary(self) -> BoundaryDeclaration:
        return local_boundary()

    def workspace_path_inside(self, request: SandboxRequest) -> str:
        return str(request.workspace)

    def state_path_inside(self, request: SandboxRequest) -> str | None:
        return None if request.state_dir is None else str(request.state_dir)

    def runtime_path_inside(self, runtime_binds: Sequence[Path], host: Path) -> str:
        return str(host)

    def python_inside(self) -> str:
        return host_python()

    def toolbox_argv(self) -> list[str]:
        return [host_python(), "-I", "-S", str(_PACKAGE_DIR / "toolbox.py")]

    @asynccontextmanager
    async def stream(
        self, request: SandboxRequest, first_line: str
    ) -> AsyncIterator[SandboxProcess]:
        log.warning(
            "sandbox.unisolated_run", conversation_id=request.conversation_id, warning=WARNING
        )
        process = await start_uncancellable(self._start(request))
        try:
            with contextlib.suppress(SandboxIOError):  # a program that died at once: see exit
                await process.send_line(first_line)
            yield process
        finally:
            await process.close()

    async def _start(self, request: SandboxRequest) -> ManagedProcess:
        if not request.workspace.is_dir():
            raise SandboxStartError(f"workspace {request.workspace} is not a directory")
        if request.state_dir is not None:
            request.state_dir.mkdir(parents=True, exist_ok=True)
        home = Path(tempfile.mkdtemp(prefix="synthorg-local-home-"))
        path = f"{host_python_dir()}/bin:/usr/local/bin:/usr/bin:/bin"
        env = {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", **request.env}
        # Always behind the launcher: it adopts orphans (no pid namespace here) and runs
        # the forwarders on the host's loopback, relaying to the same unix sockets.
        forwards = [
            a
            for ep in request.endpoints
            for a in ("--forward", f"{ep.sandbox_port}={ep.host_socket}")
        ]
        launcher = [host_python(), "-I", "-S", str(_PACKAGE_DIR / "launcher.py"), "--subreaper"]
        argv = [*launcher, *forwards, "--", *request.argv]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=request.workspace,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=STREAM_LIMIT,
                start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(home, ignore_errors=True)
            raise SandboxStartError(f"cannot start {argv[0]}: {exc}") from exc
        return ManagedProcess(proc, _LocalControl(proc.pid, home), request.limits)


_FREEZE_ROUNDS = 20


class _LocalControl:
    """Kill the run's process group (descendants that leave it escape: no isolation)."""

    def __init__(self, pgid: int, home: Path) -> None:
        self._pgid = pgid
        self._home = home

    def kill(self) -> None:
        # Freeze first, then kill: a process that forks between our listing of descendants
        # and the kill (a `setsid` child leaves the group) would otherwise escape to init.
        frozen: set[int] = set()
        for _ in range(_FREEZE_ROUNDS):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pgid, signal.SIGSTOP)
            found = {self._pgid, *_descendants(self._pgid)} - frozen
            if not found:
                break
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= found
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pgid, signal.SIGKILL)

    def verdicts(self) -> Verdicts:
        return Verdicts()

    def cleanup(self) -> None:
        shutil.rmtree(self._home, ignore_errors=True)


def _descendants(root: int) -> list[int]:
    """Live descendants of root, found by walking /proc's parent links."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], {root}
    while frontier:
        children = [pid for pid, ppid in parents.items() if ppid in frontier]
        found += children
        frontier = set(children)
    return found
