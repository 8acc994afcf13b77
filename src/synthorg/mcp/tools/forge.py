"""The forge's REST API (GitHub shape) as the tools use it: token held here, scope checked here.

Every request goes to the configured API base only, never follows a redirect with the token,
reads a capped body, and redacts before cutting. ``run_pull`` finds the run's own pull request:
a PR is the run's only if its head is the run's branch in the configured repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import httpx

from synthorg.mcp.config import ForgeConfig
from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.redact import Redactor, cut
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.vault import CredentialKind

BODY_CAP = 4 * 1024 * 1024
"""The most of one forge response that is read."""
ERROR_CAP = 1000


@dataclass(frozen=True, slots=True)
class ForgeReply:
    """One answer of the forge: status, parsed JSON (or None), and the raw text."""

    status: int
    data: Any
    text: str


def forge_of(ctx: ToolContext, tool: str) -> ForgeConfig:
    """The project's forge; refused when none is configured."""
    forge = ctx.scope.project.forge
    if forge is None:
        raise ToolRefusedError(
            f"{tool} is not configured for project {ctx.scope.project.project_id!r} "
            "(it needs a [forge] section in the MCP config)"
        )
    return forge


def forge_message(reply: ForgeReply, redactor: Redactor) -> str:
    """The forge's error message, redacted then cut."""
    data = reply.data
    if isinstance(data, dict):
        parts = [str(data.get("message", ""))]
        for err in data.get("errors", []) or []:
            parts.append(str(err.get("message") or err) if isinstance(err, dict) else str(err))
        text = "; ".join(p for p in parts if p)
    else:
        text = reply.text
    return cut(redactor.text(text), ERROR_CAP)


class ForgeClient:
    """Authenticated calls to one project's forge repository."""

    def __init__(self, ctx: ToolContext, forge: ForgeConfig) -> None:
        self._ctx = ctx
        self._forge = forge
        token = ctx.vault.get(ctx.scope.project.project_id, CredentialKind.FORGE)
        if token is None:
            raise ToolFailedError(
                f"project {ctx.scope.project.project_id!r} has no forge token in the vault; "
                "ask the operator to set the forge token_env"
            )
        self._token = token
        owner, repo = quote(forge.owner, safe=""), quote(forge.repo, safe="")
        self.repo_url = f"{forge.api_base_url}/repos/{owner}/{repo}"

    @property
    def full_name(self) -> str:
        """owner/repo as the forge names the repository."""
        return f"{self._forge.owner}/{self._forge.repo}"

    def _headers(self, *, auth: bool) -> dict[str, str]:
        headers = {
            "accept": "application/vnd.github+json",
            "x-github-api-version": "2022-11-28",
            "user-agent": "synthorg-mcp",
            "accept-encoding": "identity",
        }
        if auth:
            headers["authorization"] = f"Bearer {self._token.get_secret_value()}"
        return headers

    async def call(
        self,
        method: str,
        path: str,
        *,
        payload: Any = None,
        params: dict[str, str] | None = None,
    ) -> ForgeReply:
        """One request under the repository URL; the location of a redirect is in ``text``."""
        return await self._send(method, self.repo_url + path, payload, params, auth=True)

    async def _send(
        self, method: str, url: str, payload: Any, params: dict[str, str] | None, *, auth: bool
    ) -> ForgeReply:
        try:
            # No redirects: the token must only ever go to the configured API base.
            async with (
                httpx.AsyncClient(
                    timeout=self._forge.timeout_s, follow_redirects=False, trust_env=False
                ) as client,
                client.stream(
                    method, url, json=payload, params=params, headers=self._headers(auth=auth)
                ) as response,
            ):
                if response.is_redirect:
                    return ForgeReply(response.status_code, None, response.headers["location"])
                body = bytearray()
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) > BODY_CAP:
                        raise ToolFailedError(
                            f"the forge's answer to {method} {url} is larger than {BODY_CAP} bytes"
                        )
        except httpx.HTTPError as exc:
            raise ToolFailedError(f"forge request to {url} failed: {type(exc).__name__}") from exc
        text = body.decode("utf-8", "replace")
        try:
            data: Any = json.loads(body) if body else None
        except ValueError:
            data = None
        return ForgeReply(response.status_code, data, text)

    async def follow_without_token(self, location: str, limit: int) -> str:
        """GET a redirect target (a log blob) with no credential; at most ``limit`` bytes."""
        target = urljoin(self.repo_url, location)
        api = urlsplit(self._forge.api_base_url)
        parts = urlsplit(target)
        if parts.scheme != "https" and (parts.scheme, parts.netloc) != (api.scheme, api.netloc):
            raise ToolFailedError(f"the forge redirected to {target!r}, which is not https")
        try:
            async with (
                httpx.AsyncClient(
                    timeout=self._forge.timeout_s, follow_redirects=False, trust_env=False
                ) as client,
                client.stream("GET", target, headers=self._headers(auth=False)) as response,
            ):
                if response.status_code != 200:
                    raise ToolFailedError(f"log download answered HTTP {response.status_code}")
                body = bytearray()
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) > limit:
                        del body[:-limit]  # keep the end: that is where a failure is
        except httpx.HTTPError as exc:
            raise ToolFailedError(f"log download failed: {type(exc).__name__}") from exc
        return body.decode("utf-8", "replace")

    def _is_runs(self, pull: Any) -> bool:
        head = pull.get("head") if isinstance(pull, dict) else None
        if not isinstance(head, dict) or head.get("ref") != self._ctx.scope.branch:
            return False
        repo = head.get("repo")
        # A fork's branch of the same name is not the run's.
        return isinstance(repo, dict) and repo.get("full_name") == self.full_name

    async def run_pull(self, number: int | None) -> dict[str, Any]:
        """The run's own pull request (``number`` must be it, when given)."""
        branch = self._ctx.scope.branch
        if number is not None:
            reply = await self.call("GET", f"/pulls/{number}")
            if reply.status == 404:
                raise ToolRefusedError(f"pull request #{number} does not exist")
            self.expect(reply, 200, f"reading pull request #{number}")
            if not self._is_runs(reply.data):
                raise ToolRefusedError(
                    f"pull request #{number} is not this run's: only the pull request from "
                    f"branch {branch!r} may be read or commented on"
                )
            return dict(reply.data)
        reply = await self.call(
            "GET",
            "/pulls",
            params={"head": f"{self._forge.owner}:{branch}", "state": "all", "per_page": "20"},
        )
        self.expect(reply, 200, "listing pull requests")
        mine: list[dict[str, Any]] = [
            p for p in reply.data or [] if isinstance(p, dict) and self._is_runs(p)
        ]
        if not mine:
            raise ToolRefusedError(
                f"branch {branch!r} has no pull request yet; open one with open_pull_request"
            )
        newest: dict[str, Any] = max(mine, key=lambda p: int(p.get("number") or 0))
        return newest

    def expect(self, reply: ForgeReply, status: int, doing: str) -> None:
        """Raise ToolFailedError (redacted forge message) unless ``reply`` has ``status``."""
        if reply.status != status:
            raise ToolFailedError(
                f"the forge refused {doing} (HTTP {reply.status}): "
                f"{forge_message(reply, self._ctx.redactor)}"
            )
