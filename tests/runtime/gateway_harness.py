"""The real gateway with the scripted provider, served on loopback from a background thread.

The entrypoint is a blocking subprocess driven from synchronous tests, so the gateway (an
asyncio app over a real SQLite ledger) gets its own event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from decimal import Decimal
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from synthorg.domain.binding import RunBinding
from synthorg.gateway.app import GatewayApp, create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig, ModelPrice, ProviderConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import ScriptedSequence, ScriptedToolCall, ScriptedTurn
from synthorg.gateway.signer import GatewaySigner
from synthorg.gateway.wire import ChatMessage
from synthorg.mcp import MCP_PATH, serve_mcp
from synthorg.mcp.auth import BearerAuthMiddleware, claims_from_request
from synthorg.store import open_store
from synthorg.store.protocol import ExecutionUsage

MODEL = "scripted-openhands"
PRICE = ModelPrice(input_per_mtok_usd=Decimal(2), output_per_mtok_usd=Decimal(8))
INPUT_PER_TOKEN = float(PRICE.input_per_mtok_usd) / 1_000_000
OUTPUT_PER_TOKEN = float(PRICE.output_per_mtok_usd) / 1_000_000


def calls(*tool_calls: tuple[str, Mapping[str, Any]]) -> ScriptedTurn:
    """One model turn making several tool calls at once."""
    return ScriptedTurn(tool_calls=tuple(ScriptedToolCall(n, a) for n, a in tool_calls))


class RecordingScript:
    """A ScriptedSequence (turn = number of assistant messages so far) that keeps each request."""

    def __init__(self, turns: Sequence[ScriptedTurn]) -> None:
        self._sequence = ScriptedSequence("openhands-runtime-e2e", turns)
        self.requests: list[list[ChatMessage]] = []
        self.tool_names: list[set[str]] = []
        """Names of the tools each request offered the model."""

    def __call__(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> ScriptedTurn:
        self.requests.append(list(messages))
        self.tool_names.append({str(t.get("function", {}).get("name")) for t in tools or ()})
        return self._sequence(messages, tools)

    def history_text(self, index: int) -> str:
        """Everything request ``index`` carried, as one string to search."""
        return "\n".join(m.model_dump_json() for m in self.requests[index])


NOTE_TOOL = "project_note"


def note_mcp_app(signer: GatewaySigner, calls: list[tuple[str, str]]) -> ASGIApp:
    """A one-tool MCP server behind the real bearer middleware (stands in for the tool set)."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"note": {"type": "string"}}}
        return types.ListToolsResult(
            tools=[types.Tool(name=NOTE_TOOL, description="Record a note.", input_schema=schema)]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        claims = claims_from_request(ctx.request)
        assert claims is not None
        text = str((params.arguments or {}).get("note", ""))
        calls.append((claims.project_id, text))
        reply = f"noted for {claims.project_id}: {text}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=reply)])

    server: Server[Any] = Server("runtime-test", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return BearerAuthMiddleware(app, signer)


class GatewayThread:
    """Gateway + scripted provider + SQLite ledger on 127.0.0.1, for one test."""

    def __init__(self, tmp_path: Path, script: RecordingScript, *, mcp: bool = False) -> None:
        self.script = script
        self._with_mcp = mcp
        self.mcp_url: str | None = None
        self.mcp_calls: list[tuple[str, str]] = []
        """(project from the verified bearer, text) of every MCP tool call."""
        self._tmp = tmp_path
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._app: GatewayApp | None = None
        self._error: BaseException | None = None
        self.base_url = ""
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        store = await open_store(self._tmp / "gateway-ledger.db")
        config = GatewayConfig(
            providers=[ProviderConfig(name="scripted", kind="scripted", models=(MODEL,))],
            prices={MODEL: PRICE},
            signing_key_file=self._tmp / "keys" / "gateway.key",
        )
        providers = {"scripted": ScriptedProvider({MODEL: self.script})}
        signer = signer_for(config)
        self._app = create_gateway_app(config, signer, store, providers)
        try:
            async with contextlib.AsyncExitStack() as stack:
                endpoints = await stack.enter_async_context(serve_embedded(self._app, tcp_port=0))
                assert endpoints.tcp_base_url
                self.base_url = endpoints.tcp_base_url
                if self._with_mcp:
                    app = note_mcp_app(signer, self.mcp_calls)
                    self.mcp_url = (await stack.enter_async_context(serve_mcp(app))).url
                self._ready.set()
                await self._stop.wait()
        finally:
            await self._app.gateway.aclose()
            await store.close()

    def __enter__(self) -> GatewayThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError("gateway failed to start") from self._error
        return self

    def __exit__(self, *_: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _call[T](self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(30)

    def open_run(self, conversation_id: str) -> tuple[str, str]:
        """Open an execution in the ledger and mint its bearer: (execution_id, token)."""
        assert self._app is not None
        binding = RunBinding(
            execution_id=f"exec-{secrets.token_hex(4)}",
            agent_id="agent-1",
            task_id="task-1",
            project_id="proj-1",
            conversation_id=conversation_id,
            provider="scripted",
            model_id=MODEL,
        )
        return binding.execution_id, self._call(self._app.gateway.issue(binding, ttl_s=600))

    def usage(self, execution_id: str) -> ExecutionUsage:
        """The gateway's authoritative totals for an execution."""
        assert self._app is not None
        return self._call(self._app.gateway.usage(execution_id))
