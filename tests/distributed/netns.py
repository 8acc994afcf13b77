"""Workers as separate hosts: a network namespace each, reaching the shared services over a veth.

Each host gets ``ip netns`` + a veth pair on its own /30 and no route anywhere else. The
shared services (PostgreSQL, Temporal, the git remote) listen on the machine's loopback only,
so each port is relayed twice with ``socat``: inside the namespace from its own loopback to
the host end of the veth, and on the host from that address to the loopback. A worker's
config therefore stays the same (127.0.0.1:PORT), yet every byte it exchanges with the
store, Temporal and the remote crosses its veth, and nothing else is reachable.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

_READY_S = 30.0


def available() -> str | None:
    """Why namespaces cannot be made here, None when they can."""
    if os.geteuid() != 0:
        return "needs root (ip netns)"
    for tool in ("ip", "socat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@dataclass
class Host:
    """One namespace: its name, its veth addresses and the relays started for it."""

    netns: str
    host_ip: str
    ns_ip: str
    relays: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def prefix(self) -> tuple[str, ...]:
        """Argv prefix that runs a command inside the namespace (same pid, same files)."""
        return ("ip", "netns", "exec", self.netns)

    def in_ns(self, *argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*self.prefix, *argv], capture_output=True, check=False)

    def _relay(self, argv: Sequence[str]) -> None:
        self.relays.append(
            subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )

    def relay(self, port: int) -> None:
        """``127.0.0.1:port`` inside the namespace reaches the machine's ``127.0.0.1:port``."""
        self._relay(
            ["socat", f"TCP-LISTEN:{port},bind={self.host_ip},reuseaddr,fork",
             f"TCP:127.0.0.1:{port}"]
        )  # fmt: skip
        self._relay(
            [*self.prefix, "socat", f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork",
             f"TCP:{self.host_ip}:{port}"]
        )  # fmt: skip
        deadline = time.monotonic() + _READY_S
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2).close()"
        while self.in_ns("python3", "-c", probe).returncode != 0:  # until relayed (bounded)
            assert time.monotonic() < deadline, f"port {port} not relayed into {self.netns}"
            time.sleep(0.1)

    def reaches(self, host: str, port: int) -> bool:
        """Whether a TCP connection from inside the namespace to ``host:port`` succeeds."""
        probe = f"import socket; socket.create_connection(({host!r}, {port}), 2).close()"
        return self.in_ns("python3", "-c", probe).returncode == 0


@contextmanager
def hosts(count: int, ports: Sequence[int]) -> Iterator[list[Host]]:
    """``count`` namespaces, each with ``ports`` relayed over its veth; all gone afterwards."""
    tag = secrets.token_hex(3)
    subnet = 100 + secrets.randbelow(150)
    made: list[Host] = []
    try:
        for n in range(count):
            host = Host(
                netns=f"synthorg-{tag}-{n}",
                host_ip=f"10.{subnet}.{n}.1",
                ns_ip=f"10.{subnet}.{n}.2",
            )
            outer, inner = f"so{tag}{n}h", f"so{tag}{n}n"  # <= 15 characters
            _run("ip", "netns", "add", host.netns)
            made.append(host)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            _run("ip", "link", "set", inner, "netns", host.netns)
            _run("ip", "addr", "add", f"{host.host_ip}/30", "dev", outer)
            _run("ip", "link", "set", outer, "up")
            for argv in (
                ("ip", "addr", "add", f"{host.ns_ip}/30", "dev", inner),
                ("ip", "link", "set", inner, "up"),
                ("ip", "link", "set", "lo", "up"),
            ):
                _run(*host.prefix, *argv)
            for port in ports:
                host.relay(port)
        yield made
    finally:
        for host in made:
            for relay in host.relays:
                relay.kill()
                relay.wait()
            # Deleting the namespace deletes its veth end, and with it the host's.
            subprocess.run(["ip", "netns", "delete", host.netns], check=False, capture_output=True)


def free_port_on_machine() -> int:
    """A port of the machine nothing listens on (to show a namespace reaches no other)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
