"""open_pull_request: open a PR for the run's branch through the forge's REST API (GitHub)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field

from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.vault import CredentialKind

# git check-ref-format's main rules, enough to refuse nonsense before calling the forge.
_REF_OK = re.compile(
    r"^(?!/)(?!.*(?:\.\.|//|@\{|\.lock(?:/|$)))[^\s~^:?*\[\\\x00-\x1f\x7f]+(?<![/.])$"
)


class OpenPullRequestArgs(BaseModel):
    """Arguments of open_pull_request."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=256, description="Pull request title.")
    body: str = Field(default="", max_length=65536, description="Pull request description.")
    base: str | None = Field(
        default=None, description="Branch to merge into; defaults to the project's default base."
    )
    head: str | None = Field(
        default=None,
        description="Branch with the changes; only the run's own branch is allowed (default).",
    )
    draft: bool = Field(default=False, description="Open as a draft.")
    project_id: str | None = Field(
        default=None, description="Project to act on; only the run's own project is allowed."
    )


def _forge_message(response: httpx.Response) -> str:
    try:
        data: Any = response.json()
    except ValueError:
        return response.text[:500]
    if not isinstance(data, dict):
        return str(data)[:500]
    parts = [str(data.get("message", ""))]
    for err in data.get("errors", []) or []:
        parts.append(str(err.get("message") or err) if isinstance(err, dict) else str(err))
    return "; ".join(p for p in parts if p)[:1000]


class OpenPullRequestTool:
    """Opens a pull request from the run's branch with the project's forge token."""

    name = "open_pull_request"
    description = (
        "Open a pull request from this run's branch (synthorg/<conversation id>) into a base "
        "branch of the project's forge repository. Push the branch with git_push first."
    )
    args_model = OpenPullRequestArgs

    async def run(self, ctx: ToolContext, args: OpenPullRequestArgs) -> str:
        """Open the pull request; return its number and URL."""
        scope = ctx.scope
        scope.check_project(args.project_id)
        head = scope.check_branch(args.head)
        forge = scope.project.forge
        if forge is None:
            raise ToolRefusedError(
                f"open_pull_request is not configured for project {scope.project.project_id!r} "
                "(it needs a [forge] section in the MCP config)"
            )
        base = args.base or forge.default_base
        if not _REF_OK.match(base):
            raise ToolRefusedError(f"base {base!r} is not a valid branch name")
        if base == head:
            raise ToolRefusedError(f"base and head are both {head!r}; name another base branch")
        token = ctx.vault.get(scope.project.project_id, CredentialKind.FORGE)
        if token is None:
            raise ToolFailedError(
                f"project {scope.project.project_id!r} has no forge token in the vault; "
                "ask the operator to set the forge token_env"
            )
        owner, repo = quote(forge.owner, safe=""), quote(forge.repo, safe="")
        url = f"{forge.api_base_url}/repos/{owner}/{repo}/pulls"
        payload = {
            "title": args.title,
            "head": head,
            "base": base,
            "body": args.body,
            "draft": args.draft,
        }
        headers = {
            "authorization": f"Bearer {token.get_secret_value()}",
            "accept": "application/vnd.github+json",
            "x-github-api-version": "2022-11-28",
            "user-agent": "synthorg-mcp",
        }
        try:
            # No redirects: the token must only ever go to the configured API base.
            async with httpx.AsyncClient(
                timeout=forge.timeout_s, follow_redirects=False, trust_env=False
            ) as client:
                response = await client.post(url, json=payload, headers=headers)
        except httpx.HTTPError as exc:
            raise ToolFailedError(f"forge request to {url} failed: {type(exc).__name__}") from exc
        if response.status_code != 201:
            raise ToolFailedError(
                f"the forge refused the pull request (HTTP {response.status_code}): "
                f"{ctx.redactor.text(_forge_message(response))}"
            )
        data = response.json()
        return (
            f"opened pull request #{data.get('number')} ({head} -> {base}): "
            f"{data.get('html_url', '')}"
        )
