"""Credentialed MCP tools offered to the model beside the native ones (run on the MCP server)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from synthorg.domain import RiskLevel
from synthorg.engine.native.tools.base import Tool, ToolArgumentError, ToolResult


class McpToolInfo(Protocol):
    """A tool the MCP server lists."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...


class McpCallResult(Protocol):
    """What an MCP tool call returned."""

    @property
    def text(self) -> str: ...
    @property
    def is_error(self) -> bool: ...


class McpClient(Protocol):
    """Lists and calls MCP tools; ``synthorg.mcp.client.McpToolClient`` is one."""

    async def list_tools(self) -> Sequence[McpToolInfo]:
        """Every tool offered to this bearer."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> McpCallResult:
        """Call a tool; refusals come back as is_error."""
        ...


McpClientFactory = Callable[[str, str], McpClient]
"""(MCP base URL, run bearer) -> client."""


@dataclass(frozen=True)
class McpTool:
    """One MCP tool: its schema comes from the server, which also validates fully."""

    info: McpToolInfo
    client: McpClient

    @property
    def name(self) -> str:
        return self.info.name

    def spec(self) -> dict[str, Any]:
        schema = dict(self.info.input_schema) or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.info.description,
                "parameters": schema,
            },
        }

    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        # The server validates types; catching missing and unknown fields here spares a call.
        schema = self.info.input_schema
        missing = [k for k in schema.get("required", ()) if k not in arguments]
        if missing:
            raise ToolArgumentError(f"invalid arguments for {self.name}: missing {missing}")
        known = schema.get("properties")
        if isinstance(known, dict) and schema.get("additionalProperties") is False:
            extra = sorted(set(arguments) - set(known))
            if extra:
                raise ToolArgumentError(f"invalid arguments for {self.name}: unknown {extra}")
        return arguments

    def risk(self, args: dict[str, Any]) -> RiskLevel:
        # Credentialed tools reach outside the sandbox (push, pull request, fetch).
        return RiskLevel.HIGH

    def mutates(self, args: dict[str, Any]) -> bool:
        return False

    def summary(self, args: dict[str, Any]) -> str:
        return f"mcp {self.name}"

    async def run(self, args: dict[str, Any]) -> ToolResult:
        result = await self.client.call_tool(self.name, args)
        return ToolResult(content=result.text, is_error=result.is_error)


async def mcp_tools(client: McpClient, reserved: Sequence[str]) -> list[Tool]:
    """The server's tools, minus names that would shadow a native tool."""
    listed = await client.list_tools()
    return [McpTool(info, client) for info in listed if info.name not in reserved]
