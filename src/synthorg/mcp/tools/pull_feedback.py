"""The run's own pull request after it is open: its reviews, its CI, and a comment on it.

Each tool finds the run's pull request by its head branch (or checks that a given number is
it), so a run can never read or write another run's pull request with the project's token.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from synthorg.mcp.errors import ToolFailedError
from synthorg.mcp.redact import cut
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.tools.forge import ForgeClient, forge_of

OUTPUT_CAP = 60_000
LOG_TAIL = 16_000
MAX_LOGS = 3
_FAILED = {"failure", "timed_out", "cancelled", "action_required", "startup_failure"}


class PullArgs(BaseModel):
    """Which pull request: the run's own (found by its branch) unless a number is given."""

    model_config = ConfigDict(extra="forbid")

    pull_number: int | None = Field(
        default=None, gt=0, description="The run's pull request number (found when omitted)."
    )
    project_id: str | None = Field(
        default=None, description="Project to act on; only the run's own project is allowed."
    )


class CommentArgs(PullArgs):
    """Arguments of comment_on_pull_request."""

    body: str = Field(min_length=1, max_length=65536, description="The comment (Markdown).")


def _who(item: dict[str, Any]) -> str:
    user = item.get("user")
    return str(user.get("login", "?")) if isinstance(user, dict) else "?"


def _items(data: Any) -> list[dict[str, Any]]:
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


async def _listed(client: ForgeClient, path: str, what: str) -> list[dict[str, Any]]:
    """The objects of a GitHub list endpoint (first 100); ToolFailedError saying ``what``."""
    reply = await client.call("GET", path, params={"per_page": "100"})
    client.expect(reply, 200, what)
    return _items(reply.data)


async def _pull(ctx: ToolContext, args: PullArgs, tool: str) -> tuple[ForgeClient, dict[str, Any]]:
    ctx.scope.check_project(args.project_id)
    client = ForgeClient(ctx, forge_of(ctx, tool))
    return client, await client.run_pull(args.pull_number)


class _PullReader:
    """What the read tools of the run's pull request share: its args, and they only read."""

    args_model = PullArgs
    read_only = True
    destructive = False
    idempotent = True


class PullRequestReviewsTool(_PullReader):
    """Reads the reviews, review comments and conversation of the run's pull request."""

    name = "pull_request_reviews"
    description = (
        "Read the reviews, line comments and conversation comments on this run's own pull "
        "request (the one from its branch), to address what reviewers asked for."
    )

    async def run(self, ctx: ToolContext, args: PullArgs) -> str:
        """Reviews, then line comments, then conversation comments, oldest first."""
        client, pull = await _pull(ctx, args, self.name)
        number = pull["number"]
        lines = [f"pull request #{number} ({pull.get('state', '?')}): {pull.get('title', '')}"]
        for review in await _listed(client, f"/pulls/{number}/reviews", "reading reviews"):
            lines.append(
                f"review by {_who(review)} [{review.get('state', '?')}]: {review.get('body') or ''}"
            )
        comments = await _listed(client, f"/pulls/{number}/comments", "reading review comments")
        for comment in comments:
            line = comment.get("line") or comment.get("original_line") or "?"
            where = f"{comment.get('path', '?')}:{line}"
            lines.append(f"comment by {_who(comment)} on {where}: {comment.get('body', '')}")
        talk = await _listed(client, f"/issues/{number}/comments", "reading conversation comments")
        for comment in talk:
            lines.append(f"conversation comment by {_who(comment)}: {comment.get('body', '')}")
        if len(lines) == 1:
            lines.append("no reviews or comments yet")
        return cut(ctx.redactor.text("\n".join(lines)), OUTPUT_CAP)


class CiStatusTool(_PullReader):
    """Reads the CI state of the run's pull request head: statuses, check runs, failed logs."""

    name = "ci_status"
    description = (
        "Read the CI status of this run's own pull request: the combined commit status, every "
        "check run, and the end of the log of each failed job."
    )

    async def run(self, ctx: ToolContext, args: PullArgs) -> str:
        """Combined status, check runs, then failed job log tails."""
        client, pull = await _pull(ctx, args, self.name)
        head = pull.get("head") or {}
        sha = str(head.get("sha", ""))
        if not sha.isalnum():
            return f"pull request #{pull['number']} has no head commit to report on"
        combined = await client.call("GET", f"/commits/{sha}/status")
        client.expect(combined, 200, "reading the combined status")
        status = combined.data if isinstance(combined.data, dict) else {}
        state = status.get("state", "?")
        lines = [f"pull request #{pull['number']} head {sha[:12]}: combined status {state}"]
        for item in _items(status.get("statuses")):
            said = f"{item.get('state', '?')} {item.get('description') or ''}".rstrip()
            lines.append(f"status {item.get('context', '?')}: {said}")
        runs = await client.call("GET", f"/commits/{sha}/check-runs", params={"per_page": "100"})
        client.expect(runs, 200, "reading check runs")
        checks = _items(runs.data.get("check_runs") if isinstance(runs.data, dict) else None)
        failed: list[dict[str, Any]] = []
        for check in checks:
            conclusion = check.get("conclusion")
            said = f"{check.get('status', '?')} {conclusion or ''}".rstrip()
            lines.append(f"check {check.get('name', '?')}: {said}")
            if conclusion in _FAILED:
                failed.append(check)
        for check in failed[:MAX_LOGS]:
            lines.append(f"--- log of failed job {check.get('name', '?')} (last {LOG_TAIL} bytes)")
            lines.append(await self._log(ctx, client, check))
        text = ctx.redactor.text("\n".join(lines))
        return cut(text, OUTPUT_CAP)

    async def _log(self, ctx: ToolContext, client: ForgeClient, check: dict[str, Any]) -> str:
        """The end of one failed job's log, or why it is skipped (one bad log sinks no other)."""
        try:
            return await self._fetch_log(ctx, client, check)
        except ToolFailedError as exc:
            return f"(log skipped: {exc})"

    async def _fetch_log(self, ctx: ToolContext, client: ForgeClient, check: dict[str, Any]) -> str:
        job = check.get("id")
        if not isinstance(job, int):
            return "(no job id)"
        reply = await client.call("GET", f"/actions/jobs/{job}/logs")
        if reply.status in (301, 302, 303, 307, 308):
            # Redacted before the tail is cut, so a secret at the cut is whole when replaced.
            text = await client.follow_without_token(reply.text, LOG_TAIL + 4096)
            return cut(ctx.redactor.text(text), LOG_TAIL, keep="tail")
        if reply.status == 200:
            return cut(ctx.redactor.text(reply.text), LOG_TAIL, keep="tail")
        return f"(log not available: HTTP {reply.status})"


class CommentOnPullRequestTool:
    """Posts a comment on the run's own pull request."""

    name = "comment_on_pull_request"
    description = (
        "Post a comment on this run's own pull request (e.g. to answer a reviewer). Only the "
        "pull request from this run's branch can be commented on."
    )
    args_model = CommentArgs
    read_only = False
    destructive = False
    idempotent = False

    async def run(self, ctx: ToolContext, args: CommentArgs) -> str:
        """Post the comment; return its URL."""
        client, pull = await _pull(ctx, args, self.name)
        number = pull["number"]
        reply = await client.call("POST", f"/issues/{number}/comments", payload={"body": args.body})
        client.expect(reply, 201, "the comment")
        data = reply.data if isinstance(reply.data, dict) else {}
        return f"commented on pull request #{number}: {data.get('html_url', '')}"
