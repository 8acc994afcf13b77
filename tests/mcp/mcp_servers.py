"""Loopback servers the MCP tests talk to: a git smart-HTTP remote, a forge, a fetch target."""

from __future__ import annotations

import base64
import functools
import gzip
import json
import posixpath
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

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
    upload_pack_seen: Path | None = None
    """Created when a ref listing for fetch/ls-remote is first asked (hooks may wait on it)."""
    refuse_upload_pack: bool = False
    """Answer 503 to fetch/ls-remote (the remote is reachable for pushes only)."""


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
        if "git-upload-pack" in path or "service=git-upload-pack" in query:
            if state.upload_pack_seen is not None:
                state.upload_pack_seen.touch()
            if state.refuse_upload_pack:
                self.reply(503, b"listing refs is down\n")
                return
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


def _git_sha(remote: Path, ref: str) -> str | None:
    done = subprocess.run(
        ["git", "--git-dir", str(remote), "rev-parse", "--verify", "--quiet", f"refs/heads/{ref}"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass
class ForgeState:
    """One repository's REST API, guarded by a token; heads must exist in the remote.

    ``pulls`` holds what was POSTed; ``pull_objects`` the pull requests as GitHub returns them
    (tests may add others, e.g. from another run's branch or a fork). Reviews, comments,
    statuses, check runs and job logs are seeded by the tests, keyed like GitHub's URLs.
    """

    owner: str
    repo: str
    token: str
    remote: Path
    pulls: list[dict[str, Any]] = field(default_factory=list)
    pull_objects: dict[int, dict[str, Any]] = field(default_factory=dict)
    auth_headers: list[str] = field(default_factory=list)
    reviews: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    review_comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    issue_comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    check_runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    job_logs: dict[int, str] = field(default_factory=dict)
    job_log_locations: dict[int, str] = field(default_factory=dict)
    """Where a job's log redirects instead of this forge's own blob URL."""
    requests: list[str] = field(default_factory=list)
    blob_auth_headers: list[str] = field(default_factory=list)
    default_branch: str = "main"
    """What GET /repos/{owner}/{repo} says the repository's default branch is."""

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.repo}"

    def seed_ci(
        self,
        sha: str,
        combined: str,
        statuses: list[tuple[str, str, str]],
        checks: list[tuple[int, str, str, str | None]],
    ) -> None:
        """The commit's combined status (``(context, state, description)`` each) and its check
        runs (``(id, name, status, conclusion)`` each), in GitHub's shapes."""
        self.statuses[sha] = {
            "state": combined,
            "statuses": [{"context": c, "state": st, "description": d} for c, st, d in statuses],
        }
        self.check_runs[sha] = [
            {"id": i, "name": n, "status": st, "conclusion": c} for i, n, st, c in checks
        ]

    def add_pull(self, ref: str, *, repo: str | None = None, sha: str = "0" * 40) -> int:
        """A pull request opened outside the tool (another branch, or a fork)."""
        number = max(self.pull_objects, default=0) + 1
        self.pull_objects[number] = {
            "number": number,
            "state": "open",
            "title": f"from {ref}",
            "head": {"ref": ref, "sha": sha, "repo": {"full_name": repo or self.full_name}},
            "base": {"ref": "main", "repo": {"full_name": self.full_name}},
            "html_url": f"https://forge.test/{self.full_name}/pull/{number}",
        }
        return number


class ForgeHandler(_Quiet):
    """The parts of GitHub's REST API the tools use (status codes and shapes as GitHub's)."""

    def _authorized(self) -> bool:
        state: ForgeState = self.state
        header = self.headers.get("Authorization", "")
        state.auth_headers.append(header)
        state.requests.append(f"{self.command} {self.path}")
        if header not in (f"Bearer {state.token}", f"token {state.token}"):
            self._json(401, {"message": "Bad credentials"})
            return False
        if self.headers.get("Accept") != "application/vnd.github+json":
            self._json(415, {"message": "Unsupported Accept"})
            return False
        return True

    def _route(self) -> tuple[str, dict[str, list[str]]] | None:
        state: ForgeState = self.state
        parts = urlsplit(self.path)
        prefix = f"/api/v3/repos/{state.owner}/{state.repo}"
        if not parts.path.startswith(prefix):
            self._json(404, {"message": "Not Found"})
            return None
        return parts.path.removeprefix(prefix), parse_qs(parts.query)

    def do_GET(self) -> None:
        state: ForgeState = self.state
        if self.path.startswith("/blobs/job-"):  # the signed log URL: no credential expected
            state.blob_auth_headers.append(self.headers.get("Authorization", ""))
            job = int(self.path.removeprefix("/blobs/job-").removesuffix(".log"))
            self.reply(200, state.job_logs[job].encode())
            return
        if not self._authorized():
            return
        routed = self._route()
        if routed is None:
            return
        path, query = routed
        segments = path.strip("/").split("/")
        match segments:
            case [""]:
                self._json(
                    200, {"full_name": state.full_name, "default_branch": state.default_branch}
                )
            case ["pulls"]:
                owner, _, ref = query.get("head", [":"])[0].partition(":")
                found = [
                    p
                    for p in state.pull_objects.values()
                    if p["head"]["ref"] == ref
                    and p["head"]["repo"]["full_name"].split("/")[0] == owner
                ]
                self._json(200, found)
            case ["pulls", number] if int(number) in state.pull_objects:
                self._json(200, state.pull_objects[int(number)])
            case ["pulls", number, "reviews"]:
                self._json(200, state.reviews.get(int(number), []))
            case ["pulls", number, "comments"]:
                self._json(200, state.review_comments.get(int(number), []))
            case ["issues", number, "comments"]:
                self._json(200, state.issue_comments.get(int(number), []))
            case ["commits", sha, "status"]:
                combined = state.statuses.get(sha, {"state": "pending", "statuses": []})
                self._json(200, {"sha": sha, **combined})
            case ["commits", sha, "check-runs"]:
                runs = state.check_runs.get(sha, [])
                self._json(200, {"total_count": len(runs), "check_runs": runs})
            case ["actions", "jobs", job, "logs"] if int(job) in state.job_logs:
                where = state.job_log_locations.get(int(job), f"/blobs/job-{job}.log")
                self.reply(302, b"", Location=where)
            case _:
                self._json(404, {"message": "Not Found"})

    def do_POST(self) -> None:
        state: ForgeState = self.state
        if not self._authorized():
            return
        routed = self._route()
        if routed is None:
            return
        path, _ = routed
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        segments = path.strip("/").split("/")
        if segments[:1] == ["issues"] and segments[2:] == ["comments"]:
            number = int(segments[1])
            if number not in state.pull_objects:
                self._json(404, {"message": "Not Found"})
                return
            comments = state.issue_comments.setdefault(number, [])
            comments.append(
                {"id": len(comments) + 1, "body": payload["body"], "user": {"login": "bot"}}
            )
            self._json(
                201,
                {"id": len(comments), "html_url": f"https://forge.test/c/{number}-{len(comments)}"},
            )
            return
        if segments != ["pulls"]:
            self._json(404, {"message": "Not Found"})
            return
        if payload.get("title") == "echo":
            # A misbehaving forge that echoes the credential back in its error.
            header = self.headers.get("Authorization", "")
            self._json(422, {"message": f"cannot accept {header}"})
            return
        if payload.get("title") == "echo-long":
            # The credential echoed where a cut at 1,000 characters would halve it.
            self._json(422, {"message": "x" * 989 + state.token + " was refused"})
            return
        problems = [k for k in ("title", "head", "base") if not isinstance(payload.get(k), str)]
        if problems:
            self._json(422, {"message": "Validation Failed", "errors": problems})
            return
        shas = {ref: _git_sha(state.remote, ref) for ref in (payload["head"], payload["base"])}
        for ref, sha in shas.items():
            if sha is None:
                self._json(
                    422,
                    {
                        "message": "Validation Failed",
                        "errors": [{"message": f"{ref} does not exist"}],
                    },
                )
                return
        state.pulls.append(payload)
        number = state.add_pull(payload["head"], sha=shas[payload["head"]] or "")
        pull = state.pull_objects[number]
        pull["title"] = payload["title"]
        pull["draft"] = bool(payload.get("draft"))
        self._json(201, pull)

    def _json(self, status: int, data: Any) -> None:
        self.reply(status, json.dumps(data).encode(), "application/json")


# ---------------------------------------------------------------- fetch target


@functools.cache
def gzip_bomb(layers: int = 2, size: int = 512 << 20) -> bytes:
    """``size`` zero bytes gzipped ``layers`` times (512 MiB -> about 1 KB for two layers)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    data = b"".join(packer.compress(zeros) for _ in range(size >> 20)) + packer.flush()
    for _ in range(layers - 1):
        data = gzip.compress(data, 9)
    return data


@dataclass
class FetchState:
    """What the fetch target saw: raw request targets, Host headers, pages it served."""

    targets: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    served: list[str] = field(default_factory=list)
    pages: dict[str, tuple[bytes, dict[str, str]]] = field(default_factory=dict)


class FetchHandler(_Quiet):
    """Pages for http_fetch: small, big, slow, redirecting, compressed, with secrets.

    Like nginx, it percent-decodes the path and resolves dot segments before routing, so a
    URL whose normal form differs from the raw one reaches the page the normal form names.
    """

    def do_GET(self) -> None:
        state: FetchState | None = self.state
        raw = urlsplit(self.path).path
        path = posixpath.normpath(unquote(raw)) + ("/" if raw.endswith("/") and raw != "/" else "")
        if state is not None:
            state.targets.append(self.path)
            state.hosts.append(self.headers.get("Host", ""))
            state.served.append(path)
        if state is not None and path in state.pages:
            body, headers = state.pages[path]
            self.reply(200, body, **headers)
        elif path == "/allowed/hello":
            self.reply(200, b"hello from the allow-list\n")
        elif path == "/allowed/big":
            self.reply(200, b"x" * 5_000_000)
        elif path == "/allowed/slow":
            time.sleep(3)
            self.reply(200, b"late\n")
        elif path == "/allowed/hop":
            self.reply(302, b"", Location="/allowed/hello")
        elif path == "/allowed/escape":
            self.reply(302, b"", Location="/private/secret")
        elif path == "/allowed/bomb":
            self.reply(200, gzip_bomb(), Content_Encoding="gzip, gzip")
        elif path == "/allowed/deflate-bomb":
            inner = gzip_bomb(1)
            self.reply(200, zlib.compress(inner, 9), Content_Encoding="gzip, deflate")
        elif path == "/allowed/brotli":
            self.reply(200, b"\x0b\x02\x80hello\x03", Content_Encoding="br")
        elif path.startswith("/private/"):
            self.reply(200, b"not for agents\n")
        else:
            self.reply(404, b"no such page\n")
