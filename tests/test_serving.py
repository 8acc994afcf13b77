"""Embedded ASGI serving: a unix socket whose peers are checked (SO_PEERCRED) refuses a
process of another uid at accept, before it can send a request."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from fastapi import FastAPI

from synthorg.serving import serve_asgi

CLIENT = """
import socket, sys
with socket.socket(socket.AF_UNIX) as sock:
    sock.settimeout(20)
    sock.connect(sys.argv[1])
    try:
        sock.sendall(b"GET / HTTP/1.1\\r\\nHost: s\\r\\n\\r\\n")
        print(sock.recv(12).decode() or "closed")
    except OSError as exc:
        print(type(exc).__name__)
"""
"""A plain client for the system python (another uid cannot run this checkout's venv)."""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another uid")
async def test_a_peer_of_another_uid_is_refused_at_accept() -> None:
    app = FastAPI()

    @app.get("/")
    async def root() -> dict[str, str]:
        return {"ok": "yes"}

    # A directory anyone may enter (pytest's tmp_path is root's alone).
    folder = Path(tempfile.mkdtemp(prefix="peer-", dir="/tmp"))
    folder.chmod(0o755)
    path = folder / "s.sock"
    try:
        mine, theirs = await _both(app, path)
    finally:
        shutil.rmtree(folder)
    assert mine == "HTTP/1.1 200"
    assert theirs in ("closed", "ConnectionResetError", "BrokenPipeError"), theirs


async def _both(app: FastAPI, path: Path) -> tuple[str, str]:
    async with serve_asgi(
        app, name="t", uds=path, host=None, port=None, peer_uids=frozenset({os.getuid()})
    ):
        path.chmod(0o666)  # the permissions would let anyone in: only the peer check refuses
        return await _as(None, path), await _as("synthorg-sandbox", path)


async def _as(user: str | None, path: Path) -> str:
    import asyncio

    proc = await asyncio.create_subprocess_exec(
        "/usr/bin/python3",
        "-c",
        CLIENT,
        str(path),
        user=user,
        stdout=subprocess.PIPE,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    out, _ = await proc.communicate()
    return out.decode().strip()
