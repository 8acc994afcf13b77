"""Forwarded endpoints: HTTP from inside reaches host unix-socket servers, and only those."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from synthorg.sandbox import (
    BwrapSandbox,
    ForwardedEndpoint,
    LocalSandbox,
    SandboxLimits,
    SandboxStreamer,
)
from tests.support import free_port

from .helpers import collect, py, request

BIG = 1_000_000


async def _http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str) -> None:
    """A minimal HTTP/1.1 server: echoes method, path and body size; /big sends 1 MB."""
    head = await reader.readuntil(b"\r\n\r\n")
    method, path, _ = head.split(b"\r\n")[0].decode().split(" ")
    length = 0
    for line in head.decode().split("\r\n")[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":")[1])
    body = await reader.readexactly(length)
    if path == "/big":
        payload = b"y" * BIG
    else:
        payload = json.dumps(
            {"server": name, "method": method, "path": path, "got": len(body)}
        ).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(payload)
    )
    writer.write(payload)
    await writer.drain()
    writer.close()


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str) -> None:
    await _http(reader, writer, name)


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[list[ForwardedEndpoint]]:
    sockets = tmp_path / "sockets"
    sockets.mkdir()
    started = []
    endpoints = []
    for name in ("gateway", "mcp"):
        port = free_port()  # the local backend listens on the host's loopback
        path = sockets / f"{name}.sock"
        started.append(await asyncio.start_unix_server(functools.partial(_serve, name=name), path))
        endpoints.append(ForwardedEndpoint(name=name, host_socket=path, sandbox_port=port))
    yield endpoints
    for server in started:
        server.close()


CLIENT = """
import json, sys, urllib.request
out = {}
gateway, mcp = int(sys.argv[1]), int(sys.argv[2])
for port in (gateway, mcp):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat", data=b"z" * 70000)
    out[str(port)] = json.loads(urllib.request.urlopen(req, timeout=5).read())
out["big"] = len(urllib.request.urlopen(f"http://127.0.0.1:{gateway}/big", timeout=5).read())
print(json.dumps(out))
"""


@pytest.mark.bwrap
async def test_http_through_forwarded_endpoints_works_from_inside_bwrap(
    bwrap: BwrapSandbox, workspace: Path, servers: list[ForwardedEndpoint]
) -> None:
    await _check_forwarding(bwrap, workspace, servers)


async def test_http_through_forwarded_endpoints_works_with_local(
    local: LocalSandbox, workspace: Path, servers: list[ForwardedEndpoint]
) -> None:
    await _check_forwarding(local, workspace, servers)


async def _check_forwarding(
    sandbox: SandboxStreamer, workspace: Path, endpoints: list[ForwardedEndpoint]
) -> None:
    ports = [str(e.sandbox_port) for e in endpoints]
    req = request(
        workspace,
        [*py(CLIENT), *ports],
        endpoints=endpoints,
        limits=SandboxLimits(wall_timeout_s=20),
    )
    lines, ended = await collect(sandbox, req)
    assert ended.returncode == 0, ended
    out = json.loads(lines[-1])
    gateway, mcp = ports
    assert out[gateway] == {"server": "gateway", "method": "POST", "path": "/v1/chat", "got": 70000}
    assert out[mcp]["server"] == "mcp"
    assert out["big"] == BIG
    assert endpoints[0].base_url == f"http://127.0.0.1:{gateway}"


@pytest.mark.bwrap
async def test_unforwarded_ports_stay_closed_next_to_forwarded_ones(
    bwrap: BwrapSandbox, workspace: Path, servers: list[ForwardedEndpoint]
) -> None:
    code = """
import socket, sys
for port in (int(sys.argv[1]), int(sys.argv[2])):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port)); print(port, "open")
    except OSError as exc:
        print(port, type(exc).__name__)
"""
    ports = [str(servers[0].sandbox_port), str(servers[1].sandbox_port)]
    req = request(workspace, [*py(code), *ports], endpoints=servers[:1])
    lines, _ = await collect(bwrap, req)
    assert lines == [f"{ports[0]} open", f"{ports[1]} ConnectionRefusedError"]
