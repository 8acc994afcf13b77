"""Helpers shared by the benchmark scripts (run as scripts: ``from support import ...``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


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
