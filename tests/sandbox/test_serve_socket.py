"""The agent cannot reach `synthorg serve`'s local operator socket from inside the sandbox:
the data dir is not mounted there, and the agent runs as another uid the serve refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthorg.localsock import probe
from synthorg.sandbox import BwrapSandbox
from synthorg.sandbox.identity import resolve_identity
from synthorg.server.local import serve_local
from tests.server.test_local import hello_app

from .helpers import attack

pytestmark = pytest.mark.bwrap

CONNECT = """
import json, os, pwd, socket, sys
path = sys.argv[1] if len(sys.argv) > 1 else {path!r}
out = {{"uid": os.getuid(), "dir_visible": os.path.exists(os.path.dirname(path))}}
try:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(b"GET /v1/hello HTTP/1.1\\r\\nHost: s\\r\\n\\r\\n")
        out["answer"] = sock.recv(64).decode(errors="replace")
    out["connect"] = "connected"
except OSError as exc:
    out["connect"] = type(exc).__name__
print(json.dumps(out))
"""


async def test_a_sandboxed_command_cannot_connect_to_the_serve_socket(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    home = workspace.parents[1]  # the fake data dir the workspace lives in
    async with serve_local(home, hello_app()) as path:
        assert path is not None
        assert probe(path).pid == os.getpid()  # it answers on the host
        seen = await attack(bwrap, workspace, CONNECT.format(path=str(path)))
    assert seen["connect"] in ("FileNotFoundError", "PermissionError"), seen
    assert "answer" not in seen and seen["dir_visible"] is False, seen
    assert seen["uid"] != os.getuid(), seen  # and it would be refused as another uid


@pytest.mark.skipif(os.getuid() != 0, reason="the host-root sandbox mode needs root")
async def test_a_sandbox_running_as_the_serves_own_uid_still_cannot_reach_the_socket(
    workspace: Path,
) -> None:
    """The configuration where the sandbox does not drop to another uid (explicit host-root
    opt-in): the peer check would let it in (its uid is the serve's), so the promise "the path
    does not exist there" (docs/server.md) is the whole boundary."""
    as_root = BwrapSandbox(identity=resolve_identity("", allow_root=True))
    home = workspace.parents[1]
    async with serve_local(home, hello_app()) as path:
        assert path is not None
        seen = await attack(as_root, workspace, CONNECT.format(path=str(path)))
    assert seen["uid"] == os.getuid(), seen  # the peer check alone would not refuse it
    assert seen["connect"] in ("FileNotFoundError", "PermissionError"), seen
    assert "answer" not in seen and seen["dir_visible"] is False, seen
