"""open_pull_request: open a PR for the run's branch through the forge's REST API (GitHub)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from synthorg.mcp.errors import ToolRefusedError
from synthorg.mcp.refs import check_branch_name
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.tools.forge import ForgeClient, forge_of


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


class OpenPullRequestTool:
    """Opens a pull request from the run's branch with the project's forge token."""

    name = "open_pull_request"
    description = (
        "Open a pull request from this run's branch (synthorg/<conversation id>) into a base "
        "branch of the project's forge repository. Push the branch with git_push first."
    )
    args_model = OpenPullRequestArgs
    read_only = False
    destructive = False
    idempotent = False  # a second call opens (or tries to open) another pull request

    async def run(self, ctx: ToolContext, args: OpenPullRequestArgs) -> str:
        """Open the pull request; return its number and URL."""
        scope = ctx.scope
        scope.check_project(args.project_id)
        head = scope.check_branch(args.head)
        forge = forge_of(ctx, self.name)
        base = check_branch_name(args.base or forge.default_base, "base")
        if base == head:
            raise ToolRefusedError(f"base and head are both {head!r}; name another base branch")
        client = ForgeClient(ctx, forge)
        payload = {
            "title": args.title,
            "head": head,
            "base": base,
            "body": args.body,
            "draft": args.draft,
        }
        reply = await client.call("POST", "/pulls", payload=payload)
        client.expect(reply, 201, "the pull request")
        data = reply.data if isinstance(reply.data, dict) else {}
        return (
            f"opened pull request #{data.get('number')} ({head} -> {base}): "
            f"{data.get('html_url', '')}"
        )
