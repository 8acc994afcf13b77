"""The credentialed-tool MCP server: push, pull request and fetch, scoped by the run bearer."""

from __future__ import annotations

from synthorg.mcp.audit import AuditSink
from synthorg.mcp.client import McpClientError, McpToolClient, ToolCallResult, ToolSpec
from synthorg.mcp.config import (
    FetchConfig,
    ForgeConfig,
    McpConfig,
    ProjectToolConfig,
    load_mcp_config,
)
from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.runner import McpEndpoints, serve_mcp
from synthorg.mcp.scope import run_branch
from synthorg.mcp.server import MCP_PATH, create_mcp_app
from synthorg.mcp.vault import CredentialKind, CredentialVault, load_or_create_fernet_key

__all__ = [
    "MCP_PATH",
    "AuditSink",
    "CredentialKind",
    "CredentialVault",
    "FetchConfig",
    "ForgeConfig",
    "McpClientError",
    "McpConfig",
    "McpEndpoints",
    "McpToolClient",
    "ProjectToolConfig",
    "ToolCallResult",
    "ToolFailedError",
    "ToolRefusedError",
    "ToolSpec",
    "create_mcp_app",
    "load_mcp_config",
    "load_or_create_fernet_key",
    "run_branch",
    "serve_mcp",
]
