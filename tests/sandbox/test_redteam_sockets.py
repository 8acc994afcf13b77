"""Red team: socket() and socketpair() open only AF_UNIX, AF_INET, AF_INET6 and route netlink.

The probe (``socket_probe``) tries every family number with several types inside a cold
sandbox, a pooled one and the terminal of a real native run; AF_VSOCK in particular opens on
a VM host with a virtio vsock transport and reaches the hypervisor past the network namespace.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from synthorg.sandbox import BwrapSandbox, SandboxLimits
from synthorg.sandbox.pool import SandboxPool
from synthorg.service.demo import create_demo_repo

from . import socket_probe
from .helpers import py, request
from .test_pool import _state as state_of
from .test_pool import _worktree as worktree_of
from .test_redteam_more import attack as planned_attack
from .test_redteam_more import booted

pytestmark = [pytest.mark.bwrap, pytest.mark.timeout(300)]

LIMITS = SandboxLimits(wall_timeout_s=60, disk_bytes=64 * 1024**2)
#: Reads its run spec first, as the OpenHands entrypoint does in a pooled slot.
PROGRAM = py("import sys; sys.stdin.readline()\n" + socket_probe.SOURCE)


async def _probe(runner: Any, workspace: Path, **fields: Any) -> dict[str, Any]:
    req = request(workspace, PROGRAM, limits=LIMITS, **fields)
    lines: list[str] = []
    async with runner.stream(req, "{}") as proc:
        async for line in proc:
            lines.append(line)
    assert proc.exit is not None and proc.exit.returncode == 0, (lines, proc.exit)
    return dict(json.loads(lines[-1]))


def test_a_cold_sandbox_opens_only_the_allowed_families(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    socket_probe.check(asyncio.run(_probe(bwrap, workspace)))


async def test_a_pooled_sandbox_opens_only_the_allowed_families(
    bwrap: BwrapSandbox, tmp_path: Path
) -> None:
    pool = SandboxPool(bwrap, size=1)
    template = request(
        worktree_of(tmp_path, "template"),
        PROGRAM,
        state_dir=state_of(tmp_path, "template"),
        limits=LIMITS,
    )
    try:
        pool.warm(template)
        await pool.settle()
        run = worktree_of(tmp_path, "run")
        report = await _probe(pool, run, state_dir=state_of(tmp_path, "run"))
        assert pool.served == 1  # it ran in the pooled slot, not a cold start
    finally:
        await pool.close()
    socket_probe.check(report)


async def test_a_native_runs_terminal_opens_only_the_allowed_families(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    encoded = base64.b64encode(socket_probe.SOURCE.encode()).decode()
    command = f"echo {encoded} | base64 -d | python3 > /workspace/sockets.json"
    async with booted(tmp_path / "home") as components:
        _, out, result = await planned_attack(components, repo, [command])
    branch = result.branch  # type: ignore[attr-defined]
    assert branch is not None, (result, out)
    shown = ["git", "-C", str(repo), "show", f"{branch}:sockets.json"]
    report = json.loads(subprocess.run(shown, capture_output=True, check=True).stdout)
    socket_probe.check(report)
