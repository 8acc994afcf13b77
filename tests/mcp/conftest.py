"""Fixtures of the MCP tests (defined in mcp_world, a uniquely named module)."""

from __future__ import annotations

from mcp_world import endpoints, world

__all__ = ["endpoints", "world"]
