"""The provisioning boundary: what a run is provisioned from, and the provisioner protocol.

Loop plugins (service.loops, service.openhands) are given a ProvisionContext by the
composition root (service.boot); they import it from here, never the root itself.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from synthorg.domain import ConversationRecord
from synthorg.engine import LoopDependencies
from synthorg.workspace.models import Workspace

if TYPE_CHECKING:
    from synthorg.gateway.embedded import Endpoints
    from synthorg.gateway.signer import GatewaySigner
    from synthorg.mcp.config import McpConfig
    from synthorg.mcp.runner import McpEndpoints
    from synthorg.sandbox.pool import SandboxPool
    from synthorg.sandbox.protocol import SandboxStreamer
    from synthorg.service.config import SandboxSettings
    from synthorg.service.delegation import DelegationHub
    from synthorg.settings import Settings
    from synthorg.workspace.checkpoints import CheckpointStore


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


@dataclass(frozen=True)
class ProvisionContext:
    """What loop provisioning may use: the wired infrastructure, without the service."""

    settings: Settings
    sandbox: SandboxStreamer
    sandbox_settings: SandboxSettings
    signer: GatewaySigner
    gateway_endpoints: Endpoints
    mcp_endpoints: McpEndpoints
    mcp_config: McpConfig
    checkpoints: CheckpointStore
    delegation: DelegationHub | None = None
    sandbox_pool: SandboxPool | None = None
    """Pre-started OpenHands sandboxes, one run each (``boot(openhands_pool=True)``)."""


ProvisionerFactory = Callable[[ProvisionContext], LoopProvisioner]
"""Builds the provisioner of a booted process from what it wired."""
