"""Fixtures of the MCP tests (defined in mcp_world, a uniquely named module)."""

from __future__ import annotations

from mcp_world import endpoints, own_pull, world

__all__ = ["endpoints", "own_pull", "world"]
