"""Teardown on every exit path: no process (nor cgroup) outlives the run."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from synthorg.paths import synthorg_home
from synthorg.sandbox import (
    BwrapSandbox,
    ExitReason,
    LocalSandbox,
    SandboxProcess,
    SandboxRequest,
    SandboxStreamer,
)
from synthorg.sandbox.cgroups import cgroup_label
from synthorg.sandbox.quota import owner_root, unavailable_reason
from synthorg.sandbox.quota_sweep import sweep_stale

from .helpers import processes_with, request


def _marker() -> str:
    """A unique sleep duration: findable in every leftover's command line."""
    return f"{1000 + secrets.randbelow(10**6)}.{secrets.randbelow(10**6):06d}"


def _program(marker: str, then: str) -> list[str]:
    # Background children in and out of the process group, then `then`.
    return [
        "bash",
        "-c",
        f"sleep {marker} & setsid sleep {marker} & (sleep {marker} &) ; echo ready; {then}",
    ]


def _sandboxes(request: pytest.FixtureRequest) -> SandboxStreamer:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


@pytest.fixture(params=[pytest.param("bwrap", marks=pytest.mark.bwrap), "local"])
def sandbox(request: pytest.FixtureRequest) -> SandboxStreamer:
    return _sandboxes(request)


def _cgroup_dirs(sandbox: SandboxStreamer, marker: str) -> set[Path]:
    """This run's cgroups (other processes on the host may run sandboxes meanwhile)."""
    if not isinstance(sandbox, BwrapSandbox):
        return set()
    parents = [p for p in sandbox.cgroups.parents.values() if p.exists()]
    label = cgroup_label(f"td-{marker}")
    return {d for p in parents for d in p.iterdir() if d.name.startswith(label)}


def _req(workspace: Path, marker: str, then: str) -> SandboxRequest:
    return request(workspace, _program(marker, then), conversation_id=f"td-{marker}")


async def _assert_gone(marker: str, pid: int, sb: SandboxStreamer) -> None:
    # The kernel may take a moment to finish killing a namespace; the run already returned.
    for _ in range(50):
        if not processes_with(marker):
            break
        await asyncio.sleep(0.01)
    assert processes_with(marker) == []
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _cgroup_dirs(sb, marker) == set()


def _sleeps(marker: str) -> list[psutil.Process]:
    return [p for p in processes_with(marker) if p.name() == "sleep"]


async def _ready(proc: SandboxProcess) -> None:
    async for line in proc:
        if line == "ready":
            return
    raise AssertionError(f"no ready line: {proc.exit}")


async def test_natural_end_leaves_nothing(sandbox: SandboxStreamer, workspace: Path) -> None:
    marker = _marker()
    req = _req(workspace, marker, "exit 3")
    async with sandbox.stream(req, "{}") as proc:
        lines = [line async for line in proc]
        assert processes_with(marker) == [] or isinstance(sandbox, LocalSandbox)
    assert lines == ["ready"]
    assert proc.exit is not None and proc.exit.reason is ExitReason.COMPLETED
    assert proc.exit.returncode == 3
    await _assert_gone(marker, proc.pid, sandbox)  # type: ignore[attr-defined]


async def test_consumer_breaking_early_tears_down(
    sandbox: SandboxStreamer, workspace: Path
) -> None:
    marker = _marker()
    async with sandbox.stream(_req(workspace, marker, "read; read"), "{}") as proc:
        await _ready(proc)
        # control: the children really run (a forked subshell execs its sleep a bit later)
        deadline = time.monotonic() + 30
        while len(_sleeps(marker)) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(_sleeps(marker)) == 3
        cgroups = isinstance(sandbox, BwrapSandbox) and sandbox.cgroups.parents
        assert bool(_cgroup_dirs(sandbox, marker)) == bool(cgroups)  # control: they exist
    assert proc.exit is not None and proc.exit.reason is ExitReason.STOPPED
    await _assert_gone(marker, proc.pid, sandbox)  # type: ignore[attr-defined]


async def test_exception_in_the_consumer_tears_down(
    sandbox: SandboxStreamer, workspace: Path
) -> None:
    marker = _marker()
    with pytest.raises(RuntimeError, match="consumer failed"):
        async with sandbox.stream(_req(workspace, marker, "read; read"), "{}") as p:
            proc = p
            await _ready(proc)
            raise RuntimeError("consumer failed")
    assert proc.exit is not None and proc.exit.reason is ExitReason.STOPPED
    await _assert_gone(marker, proc.pid, sandbox)  # type: ignore[attr-defined]


async def test_cancelling_the_awaiting_task_tears_down(
    sandbox: SandboxStreamer, workspace: Path
) -> None:
    marker = _marker()
    started: asyncio.Future[SandboxProcess] = asyncio.get_running_loop().create_future()

    async def consume() -> None:
        async with sandbox.stream(_req(workspace, marker, "read; read"), "{}") as p:
            await _ready(p)
            started.set_result(p)
            async for _ in p:  # blocks: the program prints nothing more
                pass

    task = asyncio.create_task(consume())
    proc = await started
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Teardown completed before the cancelled task finished, not in the background.
    assert proc.exit is not None and proc.exit.reason is ExitReason.STOPPED
    await _assert_gone(marker, proc.pid, sandbox)  # type: ignore[attr-defined]


async def test_stop_with_grace_lets_the_program_finish(
    sandbox: SandboxStreamer, workspace: Path
) -> None:
    req = request(workspace, ["bash", "-c", "read; echo ready; cat; echo bye"])
    async with sandbox.stream(req, "{}") as proc:
        await _ready(proc)
        await proc.send_line("control line")
        ended = await proc.stop(grace_s=5)
    assert ended.reason is ExitReason.COMPLETED and ended.returncode == 0


@pytest.mark.bwrap
def test_host_killed_with_sigkill_takes_the_sandbox_along(tmp_path: Path) -> None:
    """--die-with-parent: SIGKILL of the host process leaves no sandbox behind."""
    marker = _marker()
    ws = tmp_path / "ws"
    ws.mkdir()
    script = f"""
import asyncio, sys
from pathlib import Path
from synthorg.sandbox import BwrapSandbox, SandboxRequest
async def main():
    command = "echo written > inside.txt; sleep {marker} & echo ready; read; read"
    req = SandboxRequest(argv=["bash", "-c", command],
                         workspace=Path({str(ws)!r}), conversation_id="orphan")
    async with BwrapSandbox().stream(req, "{{}}") as proc:
        async for line in proc:
            print("LINE:" + line, flush=True)
asyncio.run(main())
"""
    host = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        while (out := host.stdout.readline()) and out.strip() != "LINE:ready":
            pass  # structlog's default logger also writes to stdout
        assert out.strip() == "LINE:ready"
        deadline = time.monotonic() + 30
        while not _sleeps(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_sleeps(marker)) == 1
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        deadline = time.monotonic() + 5
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_with(marker) == []
        if unavailable_reason() is None:
            # The dead host left its worktree on the quota filesystem; the next backend's
            # sweep puts the tree (with what the sandbox wrote) back in place.
            assert ws.is_mount() and (ws / "inside.txt").read_text() == "written\n"
            assert sweep_stale(owner_root(synthorg_home())) >= 1  # its data dir's
            assert not ws.is_mount() and (ws / "inside.txt").read_text() == "written\n"
    finally:
        host.kill()
        host.wait()
        if host.stdout is not None:
            host.stdout.close()


async def test_cancelling_during_start_leaves_nothing(
    sandbox: SandboxStreamer, workspace: Path
) -> None:
    """Cancel at several points of start-up (spawn, pid handshake, first line)."""
    for delay in (0, 0.001, 0.003, 0.006, 0.01, 0.02, 0.05):
        marker = _marker()

        async def consume(m: str = marker) -> None:
            async with sandbox.stream(_req(workspace, m, "read; read"), "{}") as proc:
                async for _ in proc:
                    pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(delay)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if not processes_with(marker):
                break
            await asyncio.sleep(0.01)
        assert processes_with(marker) == [], delay
        assert _cgroup_dirs(sandbox, marker) == set(), delay
