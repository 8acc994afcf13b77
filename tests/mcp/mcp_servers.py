"""Loopback servers the MCP tests talk to: a git smart-HTTP remote, a forge, a fetch target."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

GIT_HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], state: Any) -> Iterator[str]:
    """Run ``handler`` on 127.0.0.1 in a thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def state(self) -> Any:
        return self.server.state  # type: ignore[attr-defined]

    def reply(self, status: int, body: bytes, ctype: str = "text/plain", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)


# ---------------------------------------------------------------- git smart HTTP remote


@dataclass
class GitRemoteState:
    """A directory of bare repositories served read-write to one credential."""

    root: Path
    username: str
    token: str
    authorized: int = 0
    refused: int = 0
    auth_headers: list[str] = field(default_factory=list)


class GitRemoteHandler(_Quiet):
    """Basic-authenticated CGI bridge to git-http-backend (what a forge's git endpoint does)."""

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _cgi(self) -> None:
        state: GitRemoteState = self.state
        header = self.headers.get("Authorization", "")
        state.auth_headers.append(header)
        expected = "Basic " + base64.b64encode(f"{state.username}:{state.token}".encode()).decode()
        if header != expected:
            state.refused += 1
            self.reply(401, b"authentication required\n", WWW_Authenticate='Basic realm="git"')
            return
        state.authorized += 1
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(state.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": state.username,
            "REMOTE_ADDR": "127.0.0.1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.0",
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        proc = subprocess.run(
            [GIT_HTTP_BACKEND], input=body, env=env, capture_output=True, timeout=60
        )
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


# ---------------------------------------------------------------- forge (GitHub REST shape)


@dataclass
class ForgeState:
    """One repository's pulls endpoint, guarded by a token; heads must exist in the remote."""

    owner: str
    repo: str
    token: str
    remote: Path
    pulls: list[dict[str, Any]] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)


class ForgeHandler(_Quiet):
    """Implements ``POST /repos/{owner}/{repo}/pulls`` like GitHub (201, 401, 404, 422)."""

    def do_POST(self) -> None:
        state: ForgeState = self.state
        header = self.headers.get("Authorization", "")
        state.auth_headers.append(header)
        if header not in (f"Bearer {state.token}", f"token {state.token}"):
            self._json(401, {"message": "Bad credentials"})
            return
        if self.path != f"/api/v3/repos/{state.owner}/{state.repo}/pulls":
            self._json(404, {"message": "Not Found"})
            return
        if self.headers.get("Accept") != "application/vnd.github+json":
            self._json(415, {"message": "Unsupported Accept"})
            return
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if payload.get("title") == "echo":
            # A misbehaving forge that echoes the credential back in its error.
            self._json(422, {"message": f"cannot accept {header}"})
            return
        problems = [k for k in ("title", "head", "base") if not isinstance(payload.get(k), str)]
        if problems:
            self._json(422, {"message": "Validation Failed", "errors": problems})
            return
        for ref in (payload["head"], payload["base"]):
            exists = (
                subprocess.run(
                    [
                        "git",
                        "--git-dir",
                        str(state.remote),
                        "rev-parse",
                        "--verify",
                        "--quiet",
                        f"refs/heads/{ref}",
                    ],
                    capture_output=True,
                ).returncode
                == 0
            )
            if not exists:
                self._json(
                    422,
                    {
                        "message": "Validation Failed",
                        "errors": [{"message": f"{ref} does not exist"}],
                    },
                )
                return
        number = len(state.pulls) + 1
        state.pulls.append(payload)
        self._json(
            201,
            {
                "number": number,
                "html_url": f"https://forge.test/{state.owner}/{state.repo}/pull/{number}",
                "state": "open",
                "draft": bool(payload.get("draft")),
            },
        )

    def _json(self, status: int, data: Any) -> None:
        self.reply(status, json.dumps(data).encode(), "application/json")


# ---------------------------------------------------------------- fetch target


class FetchHandler(_Quiet):
    """Pages for http_fetch: small, big, slow, redirecting in and out of the allow-list."""

    def do_GET(self) -> None:
        if self.path == "/allowed/hello":
            self.reply(200, b"hello from the allow-list\n")
        elif self.path == "/allowed/big":
            self.reply(200, b"x" * 5_000_000)
        elif self.path == "/allowed/slow":
            time.sleep(3)
            self.reply(200, b"late\n")
        elif self.path == "/allowed/hop":
            self.reply(302, b"", Location="/allowed/hello")
        elif self.path == "/allowed/escape":
            self.reply(302, b"", Location="/private/secret")
        elif self.path == "/private/secret":
            self.reply(200, b"not for agents\n")
        else:
            self.reply(404, b"no such page\n")
