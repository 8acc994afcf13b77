"""The local operator's socket of `synthorg serve`: one owner per data dir, planted files and
foreign directories refused, a stale socket replaced, and streams that end with the server."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from synthorg.localsock import probe, serve_socket
from synthorg.server.local import serve_local


def hello_app() -> FastAPI:
    """A stand-in for the local app: it answers /v1/hello with this pid."""
    app = FastAPI()

    @app.get("/v1/hello")
    async def hello() -> dict[str, int]:
        return {"pid": os.getpid()}

    return app


async def _hello(path: Path) -> int:
    transport = httpx.AsyncHTTPTransport(uds=str(path))
    async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
        return int((await client.get("/v1/hello")).json()["pid"])


async def test_one_serve_per_data_dir_owns_the_socket(tmp_path: Path) -> None:
    async with serve_local(tmp_path, hello_app()) as first:
        assert first == serve_socket(tmp_path)
        assert (first.stat().st_mode & 0o777) == 0o600
        assert (first.parent.stat().st_mode & 0o777) == 0o700
        async with serve_local(tmp_path, hello_app()) as second:
            assert second is None  # the first keeps it: its clients are not cut off
            assert await _hello(first) == os.getpid()
    assert not serve_socket(tmp_path).exists()


async def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    import socket

    path = serve_socket(tmp_path)
    path.parent.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # bound, never listening, then closed: what SIGKILL leaves
    with pytest.raises(ConnectionRefusedError):
        probe(path)
    async with serve_local(tmp_path, hello_app()) as served:
        assert served == path
        assert probe(path).pid == os.getpid()


async def test_a_planted_file_is_left_alone_and_not_served(tmp_path: Path) -> None:
    path = serve_socket(tmp_path)
    path.parent.mkdir(mode=0o700)
    path.symlink_to(tmp_path / "elsewhere")
    async with serve_local(tmp_path, hello_app()) as served:
        assert served is None
    assert path.is_symlink()


async def test_a_run_dir_open_to_others_is_narrowed(tmp_path: Path) -> None:
    run = serve_socket(tmp_path).parent
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    async with serve_local(tmp_path, hello_app()) as served:
        assert served is not None
        assert (run.stat().st_mode & 0o777) == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to hand the directory to another uid")
async def test_a_run_dir_of_another_uid_is_refused(tmp_path: Path) -> None:
    run = serve_socket(tmp_path).parent
    run.mkdir(mode=0o700)
    os.chown(run, 999, 999)
    async with serve_local(tmp_path, hello_app()) as served:
        assert served is None
    assert not serve_socket(tmp_path).exists()


async def test_a_data_dir_too_deep_for_a_unix_socket_serves_on_without_it(tmp_path: Path) -> None:
    """Like a run dir it may not use: the serve goes on (TCP) without its local socket, and
    `synthorg run` runs in its own process, rather than the whole serve failing to start."""
    home = tmp_path / ("d" * 120)
    home.mkdir()
    async with serve_local(home, hello_app()) as served:
        assert served is None
    assert not serve_socket(home).exists()
