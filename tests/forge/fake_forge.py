"""A fake GitHub for the forge stages, kept honest by GitHub's REST description: every request
it receives and every answer it gives is validated against `openapi/github-rest-extract.json`
(from @octokit/openapi); answers are the description's own examples with the fields this
repository's state decides filled in. Pull request heads must exist on the real git remote."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema

DESCRIPTION = Path(__file__).parent / "openapi" / "github-rest-extract.json"
API_PREFIX = "/api/v3"


@cache
def description() -> dict[str, Any]:
    """The vendored extract."""
    data: dict[str, Any] = json.loads(DESCRIPTION.read_text())
    return data


def _nullable(schema: Any) -> Any:
    """OpenAPI 3.0's ``nullable`` as JSON Schema's null type (what jsonschema understands)."""
    if isinstance(schema, list):
        return [_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _nullable(v) for k, v in schema.items() if k not in ("nullable", "example")}
    if schema.get("nullable"):
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif "type" not in out:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def operation(method: str, path: str) -> tuple[str, dict[str, Any], dict[str, str]] | None:
    """The described operation a request names: its template, its spec, the path values."""
    for template, methods in description()["paths"].items():
        pattern = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template) + "$"
        match = re.match(pattern, path)
        if match and method.lower() in methods:
            return template, methods[method.lower()], match.groupdict()
    return None


def check(schema: Any, value: Any, what: str) -> list[str]:
    """What is wrong with ``value`` against ``schema``."""
    validator = jsonschema.Draft202012Validator(_nullable(schema))
    return [
        f"{what}: {e.message[:200]} at {list(e.absolute_path)}"
        for e in validator.iter_errors(value)
    ]


@dataclass
class FakeGitHub:
    """One repository's issues, comments and pull requests."""

    owner: str
    repo: str
    token: str
    remote: Path  # the bare repository the git remote serves
    violations: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    checks: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    """Check runs by head sha: (job id, name, conclusion)."""
    job_logs: dict[int, str] = field(default_factory=dict)
    blob_auth_headers: list[str] = field(default_factory=list)
    next_id: int = 1000

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.repo}"

    def sha(self, branch: str) -> str | None:
        done = subprocess.run(
            [
                "git",
                "--git-dir",
                str(self.remote),
                "rev-parse",
                "--verify",
                "--quiet",
                f"refs/heads/{branch}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else None

    def status_comments(self, issue: int) -> list[str]:
        return [c["body"] for c in self.comments.get(issue, [])]


def _example(spec: dict[str, Any], status: str) -> Any:
    content = spec["responses"][status]["content"]["application/json"]
    value = copy.deepcopy(next(iter(content["examples"].values()))["value"])
    # GitHub's examples leave out a few fields its schemas require (a requested team's type
    # and parent, a repository's language): no team is requested here, the language is
    # unknown, so that the fake's answers validate.
    if isinstance(value, dict):
        if "requested_teams" in value:
            value["requested_teams"] = []
        for repo in (value, value.get("source"), value.get("parent")):
            if isinstance(repo, dict) and "full_name" in repo:
                repo.setdefault("language", None)
    return value


class FakeGitHubHandler(BaseHTTPRequestHandler):
    """The described operations, answered as GitHub does."""

    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def gh(self) -> FakeGitHub:
        return self.server.state  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def _handle(self) -> None:
        gh = self.gh
        parts = urlsplit(self.path)
        if parts.path.startswith("/blobs/job-"):  # the signed log URL: no credential expected
            gh.blob_auth_headers.append(self.headers.get("Authorization", ""))
            job = int(parts.path.removeprefix("/blobs/job-").removesuffix(".log"))
            raw = gh.job_logs[job].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        gh.requests.append(f"{self.command} {parts.path}")
        gh.auth_headers.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != f"Bearer {gh.token}":
            self._send(401, {"message": "Bad credentials"})
            return
        found = operation(self.command, parts.path.removeprefix(API_PREFIX))
        if not parts.path.startswith(API_PREFIX) or found is None:
            gh.violations.append(f"undescribed request {self.command} {parts.path}")
            self._send(404, {"message": "Not Found"})
            return
        template, spec, values = found
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        known = {p["name"]: p for p in spec["parameters"]}
        problems = [
            f"unknown query parameter {k}" for k in query if known.get(k, {}).get("in") != "query"
        ]
        for name, param in known.items():
            if param["in"] == "query" and name in query:
                value: Any = query[name]
                if param["schema"].get("type") == "integer":
                    value = int(value) if value.isdigit() else value
                problems += check(param["schema"], value, f"query {name}")
        body: Any = None
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = json.loads(self.rfile.read(length))
        if "requestBody" in spec:
            schema = spec["requestBody"]["content"]["application/json"]["schema"]
            problems += check(schema, body, "request body")
        if (values.get("owner"), values.get("repo")) != (gh.owner, gh.repo):
            self._send(404, {"message": "Not Found"})
            return
        if problems:
            gh.violations += [f"{self.command} {template}: {p}" for p in problems]
            self._send(422, {"message": "Validation Failed", "errors": problems})
            return
        status, answer = self._answer(spec["operationId"], spec, values, query, body)
        if status == 302:
            self.send_response(302)
            self.send_header("Location", answer)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if str(status) in spec["responses"]:
            schema = spec["responses"][str(status)]["content"]["application/json"]["schema"]
            gh.violations += check(schema, answer, f"answer of {template}")
        self._send(status, answer)

    def _answer(
        self,
        op: str,
        spec: dict[str, Any],
        values: dict[str, str],
        query: dict[str, str],
        body: Any,
    ) -> tuple[int, Any]:
        gh = self.gh
        if op == "repos/get":
            repo = _example(spec, "200")
            repo.update(name=gh.repo, full_name=gh.full_name, default_branch="main")
            return 200, repo
        if op == "issues/list-comments":
            return 200, gh.comments.get(int(values["issue_number"]), [])
        if op == "issues/create-comment":
            comment = _example(spec, "201")
            gh.next_id += 1
            comment.update(id=gh.next_id, body=body["body"])
            gh.comments.setdefault(int(values["issue_number"]), []).append(comment)
            return 201, comment
        if op == "issues/update-comment":
            for comments in gh.comments.values():
                for comment in comments:
                    if comment["id"] == int(values["comment_id"]):
                        comment["body"] = body["body"]
                        return 200, comment
            return 404, {"message": "Not Found"}
        if op == "pulls/list":
            owner, _, ref = query.get("head", ":").partition(":")
            found = [p for p in gh.pulls.values() if p["head"]["ref"] == ref and owner == gh.owner]
            return 200, found
        if op == "pulls/create":
            sha = gh.sha(body["head"])
            if sha is None or gh.sha(body["base"]) is None:
                return 422, {"message": "Validation Failed", "errors": [{"field": "head"}]}
            pull = _example(spec, "201")
            number = max(gh.pulls, default=0) + 1
            pull.update(number=number, title=body["title"], body=body.get("body"), state="open")
            pull["html_url"] = f"https://github.test/{gh.full_name}/pull/{number}"
            pull["head"].update(ref=body["head"], sha=sha)
            pull["head"]["repo"].update(full_name=gh.full_name, name=gh.repo)
            pull["base"]["ref"] = body["base"]
            gh.pulls[number] = pull
            return 201, pull
        if op == "pulls/get":
            pull = gh.pulls.get(int(values["pull_number"]))
            return (200, pull) if pull is not None else (404, {"message": "Not Found"})
        if op == "repos/get-combined-status-for-ref":
            combined = _example(spec, "200")
            combined.update(sha=values["ref"], state="failure", statuses=[], total_count=0)
            return 200, combined
        if op == "checks/list-for-ref":
            template = _example(spec, "200")["check_runs"][0]
            runs = []
            for job, name, conclusion in gh.checks.get(values["ref"], []):
                run = copy.deepcopy(template)
                run.update(id=job, name=name, conclusion=conclusion, status="completed")
                run["head_sha"] = values["ref"]
                runs.append(run)
            return 200, {"total_count": len(runs), "check_runs": runs}
        if op == "actions/download-job-logs-for-workflow-run":
            job = int(values["job_id"])
            if job not in gh.job_logs:
                return 404, {"message": "Not Found"}
            host = self.headers.get("Host", "")
            return 302, f"http://{host}/blobs/job-{job}.log"
        if op == "pulls/update":
            pull = gh.pulls.get(int(values["pull_number"]))
            if pull is None:
                return 404, {"message": "Not Found"}
            for key in ("title", "body", "state"):
                if key in body:
                    pull[key] = body[key]
            pull["head"]["sha"] = gh.sha(pull["head"]["ref"]) or pull["head"]["sha"]
            return 200, pull
        return 404, {"message": "Not Found"}

    def _send(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)
