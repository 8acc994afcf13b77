"""The MCP client the native loops use to list and call the credentialed tools."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from synthorg.errors import BoundaryError


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model is shown it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """What a tool call returned: its text, and whether it failed or was refused."""

    text: str
    is_error: bool


class McpClientError(BoundaryError):
    """The MCP server could not be reached or refused the request (e.g. bearer expired)."""


class _BearerAuth(httpx2.Auth):
    # Read at every request, so a bearer renewed mid-run is picked up.
    def __init__(self, bearer: Callable[[], str]) -> None:
        self._bearer = bearer

    def auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._bearer()}"
        yield request


def _leaf(exc: BaseException) -> BaseException:
    # anyio task groups wrap the transport's failure in (nested) exception groups.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@contextlib.contextmanager
def _mapped(base_url: str) -> Generator[None, None, None]:
    try:
        yield
    except McpClientError:
        raise
    except Exception as exc:
        leaf = _leaf(exc)
        if isinstance(leaf, MCPError):
            raise McpClientError(f"MCP server {base_url}: {leaf.error.message}") from leaf
        if isinstance(leaf, httpx2.HTTPError | OSError):
            raise McpClientError(f"MCP server {base_url} unreachable: {leaf}") from leaf
        raise


class McpToolClient:
    """Talks streamable HTTP to the MCP server with the run's bearer.

    Use as ``async with`` to keep one connection for many calls; each method also works
    outside a block (one connection per call). ``uds`` connects through a unix socket (the
    URL's host is then only what the server sees in ``Host``).
    """

    def __init__(
        self,
        base_url: str,
        bearer: str | Callable[[], str],
        *,
        uds: Path | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        self._base_url = base_url
        self._bearer = bearer if callable(bearer) else (lambda: bearer)
        self._uds = uds
        self._timeout_s = timeout_s
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Client | None = None

    def __repr__(self) -> str:  # never show the bearer
        return f"McpToolClient({self._base_url!r})"

    async def __aenter__(self) -> McpToolClient:
        if self._client is not None:
            raise RuntimeError("McpToolClient is already open")
        stack = contextlib.AsyncExitStack()
        try:
            self._client = await stack.enter_async_context(self._connect())
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    @contextlib.asynccontextmanager
    async def _connect(self) -> Any:
        transport = httpx2.AsyncHTTPTransport(uds=str(self._uds)) if self._uds else None
        http = httpx2.AsyncClient(
            auth=_BearerAuth(self._bearer),
            transport=transport,
            timeout=httpx2.Timeout(30.0, read=self._timeout_s),
            trust_env=False,
        )
        with _mapped(self._base_url):
            async with (
                http,
                Client(streamable_http_client(self._base_url, http_client=http)) as client,
            ):
                yield client

    @contextlib.asynccontextmanager
    async def _session(self) -> Any:
        if self._client is not None:
            yield self._client
            return
        async with self._connect() as client:
            yield client

    async def list_tools(self) -> list[ToolSpec]:
        """Every tool the server offers to this bearer."""
        with _mapped(self._base_url):
            async with self._session() as client:
                listed = await client.list_tools()
        return [ToolSpec(t.name, t.description or "", dict(t.input_schema)) for t in listed.tools]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Call ``name``; a refusal or failure comes back as ``is_error`` with its reason."""
        with _mapped(self._base_url):
            async with self._session() as client:
                result = await client.call_tool(name, arguments)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return ToolCallResult(text=text, is_error=bool(result.is_error))
