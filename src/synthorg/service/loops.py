"""Every loop type, registered once as a plugin: its factory, per-run provisioning, host check.

The loop names come from the engine's catalogue (``engine/catalogue.py``): a loop added to its
family's factory table gets its family's plugin here; a new family adds one line to ``PLUGINS``.
The registry and the provisioner are derived from the plugins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from synthorg.engine import LoopDependencies, LoopRegistry, known_loop_types
from synthorg.engine.native import NATIVE_FACTORIES, NativeLoopDeps, http_model_client
from synthorg.engine.openhands import OPENHANDS_FACTORIES
from synthorg.engine.registry import LoopFactory
from synthorg.errors import ConfigError
from synthorg.logging import get_logger
from synthorg.sandbox import SandboxRequest, ToolboxClient
from synthorg.service.checkpointing import checkpoint_hook, early_scan, settle_hook
from synthorg.service.openhands import provision_openhands, require_runtime
from synthorg.service.provisioning import LoopEndpoints, LoopProvisioner, ProvisionContext, RunSetup

if TYPE_CHECKING:
    from synthorg.engine.native import McpClient

log = get_logger(__name__)

_SOCKET_ORIGIN = "http://localhost"
"""Base of URLs sent over a unix socket: only the path and the Host header matter."""


def _mcp_client(base_url: str, bearer: str, *, uds: Path) -> McpClient:
    # Imported on first use: the ``mcp`` library costs ~1 s of imports, and only runs of
    # projects with credentialed tools ever call this. Under the lazy-import lock: the MCP
    # server's app may be importing ``mcp`` in a worker thread right now.
    from synthorg.serving import lazy_imports

    with lazy_imports():
        from synthorg.mcp.client import McpToolClient

    return McpToolClient(base_url, bearer, uds=uds)


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
    async with (
        ToolboxClient(ctx.sandbox, request) as toolbox,
        early_scan(ctx.checkpoints, setup.workspace) as early,
    ):
        deps = NativeLoopDeps(
            executor=toolbox,
            checkpoint=checkpoint_hook(ctx.checkpoints, setup.workspace, early),
            settle=settle_hook(ctx.checkpoints, setup.workspace),
            mcp_client_factory=partial(_mcp_client, uds=mcp_uds),
            model_client_factory=partial(http_model_client, uds=gateway_uds),
            delegator=ctx.delegation.for_run(setup) if ctx.delegation is not None else None,
        )
        # Credentialed tools exist only for projects configured in [mcp]; others get none.
        has_tools = ctx.mcp_config.project(setup.record.task.project_id) is not None
        mcp_url = f"{_SOCKET_ORIGIN}{ctx.mcp_endpoints.path}" if has_tools else None
        yield LoopDependencies(deps), LoopEndpoints(f"{_SOCKET_ORIGIN}/v1", mcp_url)


Provision = Callable[
    [ProvisionContext, RunSetup],
    AbstractAsyncContextManager[tuple[LoopDependencies, LoopEndpoints]],
]
"""Builds a run's loop dependencies for its lifetime."""


def _no_check(ctx: ProvisionContext) -> None:
    """Nothing to check: the loop runs wherever the sandbox does."""


def _openhands_check(ctx: ProvisionContext) -> None:
    require_runtime(ctx.settings.home)


@dataclass(frozen=True)
class LoopPlugin:
    """One loop type: how to build it, what each run of it needs, whether this host can."""

    loop_type: str
    factory: LoopFactory
    provision: Provision
    check: Callable[[ProvisionContext], None] = _no_check


PLUGINS: tuple[LoopPlugin, ...] = (
    *(LoopPlugin(name, factory, _native) for name, factory in NATIVE_FACTORIES.items()),
    *(
        LoopPlugin(name, factory, provision_openhands, _openhands_check)
        for name, factory in OPENHANDS_FACTORIES.items()
    ),
)
"""Every loop this build can construct, registered once."""

_BY_TYPE = {plugin.loop_type: plugin for plugin in PLUGINS}
if set(_BY_TYPE) != known_loop_types():  # a loop family in the catalogue with no plugin
    raise ConfigError(
        f"loop plugins {sorted(_BY_TYPE)} do not match the loop catalogue "
        f"{sorted(known_loop_types())}: give the family a plugin here"
    )


def default_registry() -> LoopRegistry:
    """Every loop this build can construct."""
    return LoopRegistry({plugin.loop_type: plugin.factory for plugin in PLUGINS})


class DefaultProvisioner:
    """Provisions each run with its loop plugin (sandbox toolbox, or the OpenHands runtime)."""

    def __init__(self, ctx: ProvisionContext) -> None:
        self._ctx = ctx

    def check(self, loop_type: str) -> None:
        """Refuse at creation a loop this host cannot run (openhands without its runtime)."""
        _BY_TYPE[loop_type].check(self._ctx)

    def __call__(
        self, setup: RunSetup
    ) -> AbstractAsyncContextManager[tuple[LoopDependencies, LoopEndpoints]]:
        return _BY_TYPE[setup.record.loop_type].provision(self._ctx, setup)


def default_provisioner(ctx: ProvisionContext) -> LoopProvisioner:
    """The provisioner ``synthorg run``, ``serve`` and ``demo`` use."""
    return DefaultProvisioner(ctx)
