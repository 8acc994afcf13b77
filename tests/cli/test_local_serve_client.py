"""`synthorg run`'s client of the local socket talks only to the serve the kernel named: every
connection it makes (not only the first probe) is checked with SO_PEERCRED."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from synthorg.cli.local_serve import LocalServe
from synthorg.errors import BoundaryError
from synthorg.localsock import find_serve, serve_socket
from synthorg.server.local import serve_local
from tests.server.test_local import hello_app

OTHER_UID, OTHER_GID = 999, 995  # synthorg-sandbox: any uid but ours

# Another user's listener: answers every request as a serve would and says what it was sent.
IMPOSTOR = r"""
import os, socket, sys
path = sys.argv[1]
listener = socket.socket(socket.AF_UNIX)
listener.bind(path)
os.chmod(path, 0o777)
listener.listen()
print("listening", flush=True)
while True:
    conn, _ = listener.accept()
    data = conn.recv(65536)
    if data:  # a client that hung up at once sent nothing
        print("request", data.split(b"\r\n")[0].decode(), flush=True)
        body = b'{"pid": 1, "sandbox": "impostor"}'
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(body), body)
        )
    conn.close()
"""


@pytest.fixture
def impostor_home() -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A data dir of another uid whose run/serve.sock that uid listens on."""
    home = Path(tempfile.mkdtemp(prefix="impostor-", dir="/tmp"))
    home.chmod(0o755)
    run = serve_socket(home).parent
    run.mkdir(mode=0o755)
    os.chown(run, OTHER_UID, OTHER_GID)
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-c", IMPOSTOR, str(serve_socket(home))],
        user=OTHER_UID,
        group=OTHER_GID,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "listening"
        yield home, proc
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        shutil.rmtree(home)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a listener as another uid")
async def test_a_socket_swapped_after_the_probe_is_refused_on_every_connection(
    tmp_path: Path, impostor_home: tuple[Path, subprocess.Popen[str]]
) -> None:
    """The promise: "after connecting [run] asks SO_PEERCRED who listens: a process of another
    uid is refused, and the pid in the header is the kernel's answer" (docs/server.md). The
    data dir is reached through a symlink; it is swapped to another uid's listener between
    `find_serve`'s probe and the HTTP client's own connections."""
    impostor, proc = impostor_home
    real = tmp_path / "real"
    link = tmp_path / "home"
    link.symlink_to(real)
    async with serve_local(real, hello_app()) as served:
        assert served is not None
        found, why = find_serve(link)
        assert found is not None, why
        assert found.peer.pid == os.getpid()
        swapped = tmp_path / "swap"
        swapped.symlink_to(impostor)
        swapped.replace(link)  # atomically: the same path now leads to the other uid's socket
        async with LocalServe.client(found) as client:
            with pytest.raises(BoundaryError, match=r"not the serve pid"):
                await LocalServe(client, found).hello()
    proc.kill()
    assert proc.stdout is not None
    rest = proc.stdout.read()
    assert "request" not in rest, rest  # not a byte of the request reached it
