"""Helpers shared by the benchmark scripts (run as scripts: ``from support import ...``)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

PG = "postgresql://postgres@127.0.0.1:5432/test"
"""The benchmarks' PostgreSQL database (loopback, trust auth, as on these machines)."""


def free_port() -> int:
    """A free loopback port (bound once and released: the measured server takes it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """Return once something accepts on loopback ``port``; raise if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}: {proc.args}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} not ready after {timeout}s")


def temporal_dev_server(db: Path, address: str) -> subprocess.Popen[bytes]:
    """A Temporal dev server on loopback ``address`` (host:port), its db at ``db``."""
    binary = str(Path(sys.executable).parent / "temporal")
    return subprocess.Popen(
        [binary, "server", "start-dev", "--ip", "127.0.0.1", "--headless",
         "--port", address.rsplit(":", 1)[1], "--http-port", str(free_port()),
         "--metrics-port", str(free_port()), "--db-filename", str(db), "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class TemporalScratch:
    """A Temporal dev server and a fresh PostgreSQL schema for one benchmark run."""

    root: Path
    """A new temporary directory (the dev server's db is in it); the caller removes it."""
    address: str
    """The dev server's ``host:port``, already answering."""
    store_url: str
    """The PostgreSQL store URL whose search path is the fresh schema."""
    server_pid: int
    """The dev server's pid (to freeze or kill it)."""


@contextlib.asynccontextmanager
async def temporal_on_postgres(prefix: str) -> AsyncIterator[TemporalScratch]:
    """A dev server that answers and a schema of its own; both gone on exit (not ``root``)."""
    import psycopg

    from synthorg.distributed.config import DistributedConfig
    from synthorg.distributed.worker import connect

    schema = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    root = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    address = f"127.0.0.1:{free_port()}"
    server = temporal_dev_server(root / "temporal.db", address)
    try:
        for _ in range(600):
            try:
                await connect(DistributedConfig(address=address))
                break
            except RuntimeError:
                await asyncio.sleep(0.2)
        store = f"{PG}?options=-csearch_path%3D{schema}"
        yield TemporalScratch(root, address, store, server.pid)
    finally:
        server.terminate()
        server.wait(30)
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


BASELINE = "e9d3eaf"
"""The revision the gateway benchmarks compare with: the last with the hand-written client."""


def baseline_src(rev: str = BASELINE) -> Path:
    """``src/`` of revision ``rev`` exported from this repository (cached under /tmp), to run
    the old code beside the new in the same benchmark."""
    root = Path(__file__).resolve().parents[1]
    out = Path(tempfile.gettempdir()) / f"synthorg-bench-{rev}"
    if not (out / "src" / "synthorg").is_dir():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", rev, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out / "src"
