"""The MCP server app: lists the credentialed tools and runs each call in the bearer's scope."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import mcp_types as types
import structlog
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from synthorg.gateway.signer import GatewaySigner
from synthorg.mcp.audit import AuditSink, AuditWriteError, Outcome, record_call
from synthorg.mcp.auth import BearerAuthMiddleware, claims_from_request
from synthorg.mcp.config import McpConfig
from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.redact import Redactor
from synthorg.mcp.scope import resolve_scope
from synthorg.mcp.tools import (
    CredentialedTool,
    ToolContext,
    default_tools,
    input_schema,
    parse_args,
)
from synthorg.mcp.vault import CredentialVault

MCP_PATH = "/mcp"
"""Where the streamable HTTP endpoint is mounted."""

SERVER_NAME = "synthorg-credentialed-tools"

_log = structlog.get_logger("synthorg.mcp")


class _ToolDispatcher:
    """Runs one tool call: scope, validate, run, redact, audit; never lets a secret out."""

    def __init__(
        self,
        config: McpConfig,
        vault: CredentialVault,
        audit: AuditSink,
        tools: Sequence[CredentialedTool],
    ) -> None:
        self._config = config
        self._vault = vault
        self._audit = audit
        self._tools = {tool.name: tool for tool in tools}
        self._locks: dict[str, asyncio.Lock] = {}

    async def list_tools(self, _ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=input_schema(t))
                for t in self._tools.values()
            ]
        )

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        started = time.perf_counter()
        claims = claims_from_request(ctx.request)
        if claims is None:  # only reachable if the app is mounted without its middleware
            return _result("unauthenticated: no verified run bearer on this request", True)
        # Built per call so a credential added to the vault is redacted from then on.
        redactor = Redactor(self._vault.secret_values())
        outcome: Outcome = "ok"
        try:
            tool = self._tools.get(params.name)
            if tool is None:
                raise ToolRefusedError(
                    f"unknown tool {params.name!r}; available: {', '.join(sorted(self._tools))}"
                )
            scope = resolve_scope(self._config, claims)
            raw = dict(params.arguments or {})
            if redactor.value(raw) != raw:
                # E.g. a URL carrying a token to an allow-listed host: never send it anywhere.
                raise ToolRefusedError(
                    "the arguments contain a credential held by this server; "
                    "credentials are never passed through tool arguments"
                )
            args = parse_args(tool, raw)
            text = await tool.run(ToolContext(scope, self._vault, redactor, self._locks), args)
        except ToolRefusedError as exc:
            outcome, text = "refused", f"refused: {exc}"
        except ToolFailedError as exc:
            outcome, text = "error", f"error: {exc}"
        except Exception as exc:
            outcome, text = "error", f"error: internal failure ({type(exc).__name__})"
            _log.error(
                "mcp.tool_call.crashed",
                tool=params.name,
                error=type(exc).__name__,
                message=redactor.text(str(exc)),
            )
        text = redactor.text(text)
        try:
            await record_call(
                self._audit,
                conversation_id=claims.conversation_id,
                project_id=claims.project_id,
                execution_id=claims.execution_id,
                tool=params.name,
                arguments=redactor.value(dict(params.arguments or {})),
                outcome=outcome,
                detail=text,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        except AuditWriteError:
            return _result(
                f"{text}\n(warning: the audit record of this call could not be written; "
                "the call's effect above may have happened)",
                True,
            )
        return _result(text, outcome != "ok")


def _result(text: str, is_error: bool) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=is_error
    )


def create_mcp_app(
    config: McpConfig,
    signer: GatewaySigner,
    vault: CredentialVault,
    audit: AuditSink,
    *,
    tools: Sequence[CredentialedTool] | None = None,
) -> ASGIApp:
    """The ASGI app serving the credentialed tools at ``/mcp`` (streamable HTTP)."""
    dispatcher = _ToolDispatcher(config, vault, audit, tools or default_tools())
    server: Server[Any] = Server(
        SERVER_NAME,
        instructions="Credentialed tools scoped to this run's project and branch.",
        on_list_tools=dispatcher.list_tools,
        on_call_tool=dispatcher.call_tool,
    )
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        # Stateless: every request stands alone and carries its own bearer, so no session can
        # outlive or borrow another request's authentication.
        stateless_http=True,
        json_response=True,
        # DNS-rebinding protection guards ambient (cookie) credentials; every request here
        # carries an explicit bearer, and the sandbox reaches us under arbitrary Host names
        # (a forwarded unix socket), so the Host check would only get in the way.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return BearerAuthMiddleware(app, signer)
