"""The credentialed tools: push, pull request (open, reviews, CI, comment) and fetch."""

from __future__ import annotations

from synthorg.mcp.tools.base import CredentialedTool, ToolContext, input_schema, parse_args
from synthorg.mcp.tools.git_push import GitPushTool
from synthorg.mcp.tools.http_fetch import HttpFetchTool
from synthorg.mcp.tools.pull_feedback import (
    CiStatusTool,
    CommentOnPullRequestTool,
    PullRequestReviewsTool,
)
from synthorg.mcp.tools.pull_request import OpenPullRequestTool


def default_tools() -> tuple[CredentialedTool, ...]:
    """Every tool this server offers, in listing order."""
    return (
        GitPushTool(),
        OpenPullRequestTool(),
        PullRequestReviewsTool(),
        CiStatusTool(),
        CommentOnPullRequestTool(),
        HttpFetchTool(),
    )


__all__ = [
    "CiStatusTool",
    "CommentOnPullRequestTool",
    "CredentialedTool",
    "GitPushTool",
    "HttpFetchTool",
    "OpenPullRequestTool",
    "PullRequestReviewsTool",
    "ToolContext",
    "default_tools",
    "input_schema",
    "parse_args",
]
