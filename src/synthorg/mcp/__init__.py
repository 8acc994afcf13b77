"""The credentialed-tool MCP server: push, pull request and fetch, scoped by the run bearer.

The names below are loaded on first use (PEP 562): importing ``synthorg.mcp.config`` (every
boot does) must not pull in the ``mcp`` library (~1 s of imports), which only the server app
and the client need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from synthorg.lazy import lazy_exports

if TYPE_CHECKING:
    from synthorg.mcp.audit import AuditSink
    from synthorg.mcp.client import McpClientError, McpToolClient, ToolCallResult, ToolSpec
    from synthorg.mcp.config import (
        MCP_PATH,
        FetchConfig,
        ForgeConfig,
        McpConfig,
        ProjectToolConfig,
        load_mcp_config,
    )
    from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
    from synthorg.mcp.runner import McpEndpoints, serve_mcp
    from synthorg.mcp.scope import run_branch
    from synthorg.mcp.server import create_mcp_app
    from synthorg.mcp.vault import CredentialKind, CredentialVault, load_or_create_fernet_key

_WHERE = {
    "AuditSink": "audit",
    "McpClientError": "client",
    "McpToolClient": "client",
    "ToolCallResult": "client",
    "ToolSpec": "client",
    "MCP_PATH": "config",
    "FetchConfig": "config",
    "ForgeConfig": "config",
    "McpConfig": "config",
    "ProjectToolConfig": "config",
    "load_mcp_config": "config",
    "ToolFailedError": "errors",
    "ToolRefusedError": "errors",
    "McpEndpoints": "runner",
    "serve_mcp": "runner",
    "run_branch": "scope",
    "create_mcp_app": "server",
    "CredentialKind": "vault",
    "CredentialVault": "vault",
    "load_or_create_fernet_key": "vault",
}

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


__getattr__ = lazy_exports(__name__, _WHERE)
