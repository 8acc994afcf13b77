"""Helpers shared by the benchmark scripts (run as scripts: ``from support import ...``)."""

from __future__ import annotations

import socket
import subprocess
import time


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
