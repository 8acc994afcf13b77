"""open_pull_request: open a PR for the run's branch through the forge's REST API (GitHub)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from synthorg.mcp.config import ForgeConfig
from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.refs import RUN_BRANCH_PREFIX, check_branch_name, ref_name_problem
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.tools.forge import ForgeClient, forge_of


class OpenPullRequestArgs(BaseModel):
    """Arguments of open_pull_request."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=256, description="Pull request title.")
    body: str = Field(default="", max_length=65536, description="Pull request description.")
    base: str | None = Field(
        default=None,
        description="Branch to merge into: one of the project's base branches; defaults to "
        "the project's default base (the repository's default branch unless configured).",
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
        if args.base is not None:
            check_branch_name(args.base, "base")
            if args.base == head:
                raise ToolRefusedError(f"base and head are both {head!r}; name another base branch")
        client = ForgeClient(ctx, forge)
        base = await _allowed_base(client, forge, args.base, ctx.scope.project.project_id)
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


async def _allowed_base(
    client: ForgeClient, forge: ForgeConfig, requested: str | None, project_id: str
) -> str:
    """The base to open into: the requested one if the project allows it, else the default.

    Allowed: the configured base branches and the default base (configured, or else the
    repository's default branch as the forge reports it); never a run branch.
    """
    if requested is not None and requested in forge.base_branches:
        return requested
    default = forge.default_base or await _repository_default(client)
    allowed = set(forge.base_branches)
    if not default.startswith(RUN_BRANCH_PREFIX):  # the forge's word is not trusted for that
        allowed.add(default)
    base = default if requested is None else requested
    if base not in allowed:
        raise ToolRefusedError(
            f"base {base!r} is not one of project {project_id!r}'s base branches; a pull "
            f"request may be opened into: {', '.join(sorted(allowed)) or 'nothing'}"
        )
    return base


async def _repository_default(client: ForgeClient) -> str:
    reply = await client.call("GET", "")
    client.expect(reply, 200, "reading the repository")
    data = reply.data if isinstance(reply.data, dict) else {}
    name = data.get("default_branch")
    if not isinstance(name, str) or ref_name_problem(name) is not None:
        raise ToolFailedError(
            f"the forge gave no usable default branch for {client.full_name} ({name!r}); "
            "set default_base in the project's forge config"
        )
    return name
