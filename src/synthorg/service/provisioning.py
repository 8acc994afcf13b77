"""The provisioning boundary: what a run is provisioned from, and the provisioner protocol."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from synthorg.domain import ConversationRecord
from synthorg.engine import LoopDependencies
from synthorg.workspace.models import Workspace


@dataclass(frozen=True)
class RunSetup:
    """What provisioning a run's loop needs to know."""

    record: ConversationRecord
    workspace: Workspace
    execution_id: str
    bearer: str


@dataclass(frozen=True)
class LoopEndpoints:
    """Where the loop's own code reaches the gateway and the MCP server."""

    gateway_base_url: str
    mcp_base_url: str | None = None


class LoopProvisioner(Protocol):
    """Builds a run's loop dependencies (sandbox, tool executor, endpoints) for its lifetime."""

    def check(self, loop_type: str) -> None:
        """Raise (saying how to fix it) when this host cannot run ``loop_type``."""
        ...

    def __call__(
        self, setup: RunSetup
    ) -> AbstractAsyncContextManager[tuple[LoopDependencies, LoopEndpoints]]: ...
