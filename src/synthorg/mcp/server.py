"""The MCP server app: lists the credentialed tools and runs each call in the bearer's scope."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp

from synthorg.errors import NotFoundError
from synthorg.gateway.liveness import issued_elsewhere, run_closed
from synthorg.gateway.signer import BearerClaims, GatewaySigner
from synthorg.logging import get_logger
from synthorg.mcp.audit import AuditWriteError, McpStore, Outcome, record_call
from synthorg.mcp.auth import UNAUTHENTICATED, BearerAuthMiddleware, claims_from_request
from synthorg.mcp.config import MCP_PATH, McpConfig
from synthorg.mcp.errors import ToolFailedError, ToolOutcomeUnknownError, ToolRefusedError
from synthorg.mcp.redact import Redactor
from synthorg.mcp.scope import resolve_scope
from synthorg.mcp.target import OriginFormMiddleware
from synthorg.mcp.tools import (
    CredentialedTool,
    ToolContext,
    default_tools,
    input_schema,
    parse_args,
)
from synthorg.mcp.vault import CredentialVault

SERVER_NAME = "synthorg-credentialed-tools"

_log = get_logger("synthorg.mcp")


def _version() -> str:
    try:
        return version("synthorg")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


SERVER_VERSION = _version()


class _Dead(Exception):
    """The bearer's run cannot act (unknown or closed); the message says which."""

    def __init__(self, message: str, *, auditable: bool) -> None:
        super().__init__(message)
        self.auditable = auditable


class _ToolDispatcher:
    """Runs one tool call: liveness, scope, validate, audit intent, run, redact, audit outcome."""

    def __init__(
        self,
        config: McpConfig,
        vault: CredentialVault,
        store: McpStore,
        tools: Sequence[CredentialedTool],
    ) -> None:
        self._config = config
        self._vault = vault
        self._store = store
        self._tools = {tool.name: tool for tool in tools}
        self._locks: dict[str, asyncio.Lock] = {}

    async def list_tools(self, ctx: Any, _params: Any) -> types.ListToolsResult:
        claims = claims_from_request(ctx.request)
        if claims is not None:
            try:
                await self._check_alive(claims)
            except _Dead as exc:  # a dead bearer is told so at once, not shown tools
                raise MCPError(UNAUTHENTICATED, f"refused: {exc}") from exc
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=input_schema(t),
                    annotations=types.ToolAnnotations(
                        read_only_hint=t.read_only,
                        destructive_hint=t.destructive,
                        idempotent_hint=t.idempotent,
                        open_world_hint=True,
                    ),
                )
                for t in self._tools.values()
            ]
        )

    async def _check_alive(self, claims: BearerClaims) -> None:
        """Refuse a bearer whose conversation is unknown or whose run is over (store truth)."""
        try:
            await self._judge(claims)
        except _Dead:
            raise
        except Exception as exc:  # the store is down: nothing can be checked or audited
            _log.error("mcp.tool_call.store_unavailable", error=type(exc).__name__)
            raise _Dead(
                "the run's state could not be read from the store, so nothing was done; "
                "retry shortly",
                auditable=False,
            ) from exc

    async def _judge(self, claims: BearerClaims) -> None:
        foreign = issued_elsewhere(claims.ledger_id, self._store.ledger_id)
        if foreign is not None:
            raise _Dead(foreign, auditable=False)
        try:
            record = await self._store.get_conversation(claims.conversation_id)
        except NotFoundError as exc:
            raise _Dead(
                f"conversation {claims.conversation_id!r} is not known to this server's store; "
                "a bearer acts only for a recorded run",
                auditable=False,
            ) from exc
        if record.task.project_id != claims.project_id:
            raise _Dead(
                f"conversation {claims.conversation_id!r} belongs to another project",
                auditable=False,
            )
        try:
            row = await self._store.get_execution(claims.execution_id)
        except NotFoundError as exc:
            raise _Dead(
                f"execution {claims.execution_id!r} has no ledger row: the run was never "
                "opened, so its bearer cannot act",
                auditable=True,
            ) from exc
        if row.conversation_id != claims.conversation_id:
            raise _Dead(
                f"execution {claims.execution_id!r} belongs to another conversation",
                auditable=True,
            )
        closed = run_closed(row)  # the same rule the gateway applies (the lease included)
        if closed is not None:
            raise _Dead(closed.message, auditable=True)

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        started = time.perf_counter()
        claims = claims_from_request(ctx.request)
        if claims is None:  # only reachable if the app is mounted without its middleware
            return _result("unauthenticated: no verified run bearer on this request", True)
        # Built per call so a credential added to the vault is redacted from then on.
        redactor = Redactor(self._vault.secret_values())
        arguments = redactor.value(dict(params.arguments or {}))
        name = redactor.text(params.name)  # what is recorded and logged of the caller's words

        async def audit(outcome: Outcome, detail: str) -> None:
            await record_call(
                self._store,
                conversation_id=claims.conversation_id,
                project_id=claims.project_id,
                execution_id=claims.execution_id,
                tool=name,
                arguments=arguments,
                outcome=outcome,
                detail=detail,
                duration_ms=(time.perf_counter() - started) * 1000,
            )

        try:
            await self._check_alive(claims)
        except _Dead as exc:
            text = f"refused: {exc}"
            _log.warning("mcp.tool_call.dead_bearer", tool=name, reason=redactor.text(str(exc)))
            if exc.auditable:
                with contextlib.suppress(AuditWriteError):  # logged; the refusal stands
                    await audit("refused", text)
            return _result(text, True)

        tool = self._tools.get(params.name)
        if tool is None:
            # A protocol error, not a tool result (MCP spec: unknown tool -> -32602).
            text = f"unknown tool {name!r}; available: {', '.join(sorted(self._tools))}"
            with contextlib.suppress(AuditWriteError):  # logged; the refusal stands
                await audit("refused", f"refused: {text}")
            raise MCPError(types.INVALID_PARAMS, text)

        outcome: Outcome = "ok"
        acted = False
        try:
            scope = resolve_scope(self._config, claims)
            raw = dict(params.arguments or {})
            if redactor.value(raw) != raw:
                # E.g. a URL carrying a token to an allow-listed host: never send it anywhere.
                raise ToolRefusedError(
                    "the arguments contain a credential held by this server; "
                    "credentials are never passed through tool arguments"
                )
            args = parse_args(tool, raw)
            try:
                await audit("started", "")
            except AuditWriteError as exc:
                raise ToolRefusedError(
                    "the audit record of this call could not be written, so nothing was done; "
                    "retry once the store is writable"
                ) from exc
            acted = True
            text = await tool.run(ToolContext(scope, self._vault, redactor, self._locks), args)
        except ToolRefusedError as exc:
            outcome, text = "refused", f"refused: {exc}"
        except ToolFailedError as exc:
            outcome, text = "error", f"error: {exc}"
        except ToolOutcomeUnknownError as exc:
            outcome, text = "unknown", f"unknown: {exc}"
        except Exception as exc:
            outcome, text = "error", f"error: internal failure ({type(exc).__name__})"
            _log.error(
                "mcp.tool_call.crashed",
                tool=name,
                error=type(exc).__name__,
                message=redactor.text(str(exc)),
            )
        text = redactor.text(text)
        try:
            await audit(outcome, text)
        except AuditWriteError:
            if acted:  # the intent is on record; only its outcome is missing
                return _result(
                    f"{text}\n(warning: the outcome of this call could not be audited; "
                    "its intent was recorded before it ran)",
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
    store: McpStore,
    *,
    tools: Sequence[CredentialedTool] | None = None,
) -> ASGIApp:
    """The ASGI app serving the credentialed tools at ``/mcp`` (streamable HTTP).

    ``store`` is the conversation store and run ledger the gateway writes: tool calls are
    audited into it, and a bearer acts only while its conversation exists and its execution
    is open there.
    """
    dispatcher = _ToolDispatcher(config, vault, store, tools or default_tools())
    server: Server[Any] = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
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
    return OriginFormMiddleware(BearerAuthMiddleware(app, signer))
