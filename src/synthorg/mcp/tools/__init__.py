"""The credentialed tools: git_push, open_pull_request, http_fetch."""

from __future__ import annotations

from synthorg.mcp.tools.base import CredentialedTool, ToolContext, input_schema, parse_args
from synthorg.mcp.tools.git_push import GitPushTool
from synthorg.mcp.tools.http_fetch import HttpFetchTool
from synthorg.mcp.tools.pull_request import OpenPullRequestTool


def default_tools() -> tuple[CredentialedTool, ...]:
    """Every tool this server offers, in listing order."""
    return (GitPushTool(), OpenPullRequestTool(), HttpFetchTool())


__all__ = [
    "CredentialedTool",
    "GitPushTool",
    "HttpFetchTool",
    "OpenPullRequestTool",
    "ToolContext",
    "default_tools",
    "input_schema",
    "parse_args",
]
