"""The default loop registry and the per-run provisioning of each loop's dependencies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial

from synthorg.domain import CheckpointEvent
from synthorg.engine import LoopDependencies, LoopRegistry
from synthorg.engine.native import NATIVE_FACTORIES, NativeLoopDeps, http_model_client
from synthorg.engine.native.turn import CheckpointHook
from synthorg.engine.openhands import OPENHANDS_FACTORIES
from synthorg.mcp.client import McpToolClient
from synthorg.sandbox import SandboxRequest, ToolboxClient
from synthorg.service.boot import ProvisionContext
from synthorg.service.openhands import provision_openhands, require_runtime
from synthorg.service.runs import LoopEndpoints, LoopProvisioner, RunSetup
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.models import Workspace

_SOCKET_ORIGIN = "http://localhost"
"""Base of URLs sent over a unix socket: only the path and the Host header matter."""


def default_registry() -> LoopRegistry:
    """Every loop this build can construct."""
    return LoopRegistry({**NATIVE_FACTORIES, **OPENHANDS_FACTORIES})


def _checkpoint_hook(checkpoints: CheckpointStore, workspace: Workspace) -> CheckpointHook | None:
    if not workspace.is_git:
        return None

    async def snapshot(action_id: str) -> CheckpointEvent | None:
        checkpoint = await checkpoints.create(workspace, workspace.conversation_id)
        return CheckpointEvent(index=checkpoint.index, ref=checkpoint.ref, action_id=action_id)

    return snapshot


class DefaultProvisioner:
    """Native loops get a sandbox toolbox on the worktree, checkpoints and MCP tools;
    openhands gets its sandboxed SDK runtime (synthorg.service.openhands)."""

    def __init__(self, ctx: ProvisionContext) -> None:
        self._ctx = ctx

    def check(self, loop_type: str) -> None:
        """Refuse at creation a loop this host cannot run (openhands without its runtime)."""
        if loop_type == "openhands":
            require_runtime(self._ctx.settings.home)

    def __call__(
        self, setup: RunSetup
    ) -> AbstractAsyncContextManager[tuple[LoopDependencies, LoopEndpoints]]:
        if setup.record.loop_type == "openhands":
            return provision_openhands(self._ctx, setup)
        return _native(self._ctx, setup)


def default_provisioner(ctx: ProvisionContext) -> LoopProvisioner:
    """The provisioner ``synthorg run``, ``serve`` and ``demo`` use."""
    return DefaultProvisioner(ctx)


@asynccontextmanager
async def _native(
    ctx: ProvisionContext, setup: RunSetup
) -> AsyncIterator[tuple[LoopDependencies, LoopEndpoints]]:
    request = SandboxRequest(
        argv=ctx.sandbox.toolbox_argv(),
        workspace=setup.workspace.path,
        limits=ctx.sandbox_settings.limits,
        conversation_id=setup.record.id,
    )
    # The host side reaches the gateway and the MCP server through the same 0600 unix sockets
    # that are forwarded into sandboxes; neither listens on a TCP port in embedded mode.
    gateway_uds = ctx.gateway_endpoints.uds_path
    mcp_uds = ctx.mcp_endpoints.uds
    assert gateway_uds is not None and mcp_uds is not None
    async with ToolboxClient(ctx.sandbox, request) as toolbox:
        deps = NativeLoopDeps(
            executor=toolbox,
            checkpoint=_checkpoint_hook(ctx.checkpoints, setup.workspace),
            mcp_client_factory=partial(McpToolClient, uds=mcp_uds),
            model_client_factory=partial(http_model_client, uds=gateway_uds),
        )
        # Credentialed tools exist only for projects configured in [mcp]; others get none.
        has_tools = ctx.mcp_config.project(setup.record.task.project_id) is not None
        mcp_url = f"{_SOCKET_ORIGIN}{ctx.mcp_endpoints.path}" if has_tools else None
        yield LoopDependencies(deps), LoopEndpoints(f"{_SOCKET_ORIGIN}/v1", mcp_url)
