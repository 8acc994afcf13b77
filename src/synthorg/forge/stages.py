"""The stages after a triggered run, none of them the model's: push the landed branch, open
(or update) the pull request, and keep one status comment on the issue up to date.

The forge token stays in the MCP vault of this process; the same ``git_push`` code and
``ForgeClient`` the MCP tools use do the work, under a scope made for the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from synthorg.domain import ExecutionResult
from synthorg.mcp.config import ProjectToolConfig
from synthorg.mcp.errors import ToolRefusedError
from synthorg.mcp.redact import Redactor
from synthorg.mcp.scope import RunScope
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.tools.forge import ForgeClient
from synthorg.mcp.tools.git_push import GitPushArgs, GitPushTool
from synthorg.mcp.tools.pull_feedback import CiStatusTool, PullArgs
from synthorg.mcp.vault import CredentialVault

STATUS_MARKER = "<!-- synthorg:status -->"
"""Marks the one status comment kept up to date on an issue."""


def console_link(console_url: str | None, conversation_id: str) -> str:
    """The conversation in the console (its id when no console URL is configured)."""
    if console_url is None:
        return f"conversation `{conversation_id}`"
    return f"{console_url.rstrip('/')}/#/c/{conversation_id}"


@dataclass(frozen=True, slots=True)
class RunReport:
    """What the pull request body and the status comment say of a run."""

    conversation_id: str
    issue: int
    result: ExecutionResult
    budget_usd: Decimal | None
    console_url: str | None

    @property
    def cost(self) -> Decimal:
        """The run's own spend (its turns' cost deltas)."""
        return sum((t.cost_usd for t in self.result.turns), Decimal(0))

    @property
    def link(self) -> str:
        """The conversation in the console."""
        return console_link(self.console_url, self.conversation_id)

    def pull_body(self) -> str:
        """The pull request's body."""
        budget = f"{self.budget_usd} USD" if self.budget_usd is not None else "no budget"
        summary = self.result.final_message.strip() or "(no summary)"
        return "\n".join(
            (
                f"Resolves #{self.issue}.",
                "",
                summary,
                "",
                f"- turns: {len(self.result.turns)}",
                f"- cost: {self.cost} USD of {budget}",
                f"- loop: {self.result.loop_type}",
                f"- console: {self.link}",
            )
        )


class ForgeStages:
    """Push, pull request and status comment for one project, with its MCP credentials."""

    def __init__(
        self, project: ProjectToolConfig, vault: CredentialVault, redactor: Redactor
    ) -> None:
        if project.forge is None:
            raise ValueError(f"project {project.project_id!r} has no forge section")
        self._project = project
        self._forge = project.forge
        self._vault = vault
        self._redactor = redactor

    def _ctx(self, conversation_id: str) -> ToolContext:
        return ToolContext(
            scope=RunScope(conversation_id=conversation_id, project=self._project),
            vault=self._vault,
            redactor=self._redactor,
        )

    async def status(self, conversation_id: str, issue: int, text: str) -> None:
        """Create or edit the issue's one status comment."""
        client = ForgeClient(self._ctx(conversation_id), self._forge)
        body = f"{STATUS_MARKER}\n{text}"
        reply = await client.call("GET", f"/issues/{issue}/comments", params={"per_page": "100"})
        client.expect(reply, 200, "listing the issue's comments")
        mine = [c for c in reply.data or [] if STATUS_MARKER in str(c.get("body", ""))]
        if mine:
            edit = await client.call(
                "PATCH", f"/issues/comments/{mine[-1]['id']}", payload={"body": body}
            )
            client.expect(edit, 200, "updating the status comment")
        else:
            made = await client.call("POST", f"/issues/{issue}/comments", payload={"body": body})
            client.expect(made, 201, "the status comment")

    async def comment(self, conversation_id: str, issue: int, text: str) -> None:
        """A new comment on the issue or pull request (a refusal; not the status comment)."""
        client = ForgeClient(self._ctx(conversation_id), self._forge)
        made = await client.call("POST", f"/issues/{issue}/comments", payload={"body": text})
        client.expect(made, 201, "the comment")

    async def ci_report(self, conversation_id: str, pull_number: int | None) -> str:
        """What ``ci_status`` reports for the run's pull request: checks and failed log tails."""
        args = PullArgs(pull_number=pull_number)
        return await CiStatusTool().run(self._ctx(conversation_id), args)

    async def publish(self, report: RunReport, title: str) -> dict[str, Any]:
        """Push ``synthorg/<conversation>`` and open its pull request, or update the one
        opened before; the pull request as the forge returns it."""
        ctx = self._ctx(report.conversation_id)
        await GitPushTool().run(ctx, GitPushArgs())
        client = ForgeClient(ctx, self._forge)
        try:
            pull = await client.run_pull(None)
        except ToolRefusedError:  # none yet
            pull = None
        if pull is not None:
            reply = await client.call(
                "PATCH", f"/pulls/{pull['number']}", payload={"body": report.pull_body()}
            )
            client.expect(reply, 200, "updating the pull request")
            return dict(reply.data)
        base = self._forge.default_base or await _default_branch(client)
        reply = await client.call(
            "POST",
            "/pulls",
            payload={
                "title": title,
                "head": ctx.scope.branch,
                "base": base,
                "body": report.pull_body(),
            },
        )
        client.expect(reply, 201, "the pull request")
        return dict(reply.data)


async def _default_branch(client: ForgeClient) -> str:
    reply = await client.call("GET", "")
    client.expect(reply, 200, "reading the repository")
    return str((reply.data or {}).get("default_branch") or "main")
