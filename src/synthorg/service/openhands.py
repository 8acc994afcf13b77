"""Provisioning of the OpenHands loop for one run: runtime, sandbox launch, endpoints, prices.

The SDK runs only inside the sandbox, from the runtime venv that ``synthorg runtime build
openhands`` made. The gateway's and the MCP server's unix sockets are forwarded to fixed
loopback ports inside, so the runtime uses ordinary base URLs; its conversation state lives
in ``<home>/openhands/<conversation id>`` (outside the worktree), which is how a later run of
the same conversation re-attaches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from synthorg.engine import LoopDependencies
from synthorg.engine.openhands import (
    ContainerLaunch,
    ContainerRuntime,
    OpenHandsLoopConfig,
    OpenHandsLoopDeps,
    OpenHandsUnavailableError,
)
from synthorg.engine.openhands.container_runtime import sandbox_request
from synthorg.gateway.config import GatewayConfig
from synthorg.localsock import private_dir
from synthorg.runtime import OpenHandsRuntime, find_runtime
from synthorg.sandbox import ForwardedEndpoint, SandboxRequest
from synthorg.service.provisioning import LoopEndpoints, ProvisionContext, RunSetup
from synthorg.settings import section

GATEWAY_PORT = 18080
"""Inside the sandbox, the gateway answers at http://127.0.0.1:18080/v1."""
MCP_PORT = 18081
"""Inside the sandbox, the MCP server answers at http://127.0.0.1:18081/mcp."""
_PER_MTOK = 1_000_000


def require_runtime(home: Path) -> OpenHandsRuntime:
    """The built runtime, or OpenHandsUnavailableError telling the operator how to build it."""
    runtime = find_runtime(home)
    if runtime is None:
        raise OpenHandsUnavailableError(
            f"the OpenHands runtime is not built in {home}; run `synthorg runtime build "
            "openhands` (it installs the hash-pinned SDK into an isolated venv), then retry"
        )
    return runtime


def state_dir(home: Path, conversation_id: str) -> Path:
    """Where the SDK persists this conversation (bound read-write at the sandbox's /state)."""
    return home / "openhands" / conversation_id


def launch_for(
    ctx: ProvisionContext, setup: RunSetup, runtime: OpenHandsRuntime
) -> ContainerLaunch:
    """The sandbox launch of the entrypoint for this run's conversation."""
    state = state_dir(ctx.settings.home, setup.record.id)
    # The parent is ours (localsock.private_dir); the conversation's own dir is the sandbox
    # user's to write (its uid owns what the SDK persists there).
    (private_dir(state.parent) / state.name).mkdir(exist_ok=True, mode=0o700)
    return _launch(ctx, runtime, setup.workspace.path, state, mcp=_mcp_enabled(ctx, setup))


def pool_template(ctx: ProvisionContext) -> SandboxRequest | None:
    """An OpenHands run's sandbox request but for its worktree, state dir and id (a pool's
    slot has its own): what a pool warms at boot. With MCP when any project has tools;
    None without a built runtime."""
    runtime = find_runtime(ctx.settings.home)
    if runtime is None:
        return None
    mcp = bool(ctx.mcp_config.projects) and ctx.mcp_endpoints.uds is not None
    placeholder = ctx.settings.home
    return sandbox_request(_launch(ctx, runtime, placeholder, placeholder, mcp=mcp), "pool")


def _launch(
    ctx: ProvisionContext, runtime: OpenHandsRuntime, workspace: Path, state: Path, *, mcp: bool
) -> ContainerLaunch:
    endpoints = [_endpoint("gateway", ctx.gateway_endpoints.uds_path, GATEWAY_PORT)]
    if mcp:
        endpoints.append(_endpoint("mcp", ctx.mcp_endpoints.uds, MCP_PORT))
    # The venv and the entrypoint's dir appear at neutral paths (mountinfo inside names no
    # runtime location); the venv's python is a symlink to its base interpreter, which stays
    # at its host path.
    binds = [runtime.venv_path, runtime.entrypoint.parent]
    inside = ctx.sandbox.runtime_path_inside
    argv = [inside(binds, runtime.python), inside(binds, runtime.entrypoint)]
    # The worktree's path inside (a constant for bwrap, so a pool's slot shares it): the
    # entrypoint starts the agent's terminal there before the run spec arrives.
    probe = SandboxRequest(argv=argv, workspace=workspace, conversation_id="probe")
    return ContainerLaunch(
        argv=[*argv, ctx.sandbox.workspace_path_inside(probe)],
        workspace=workspace,
        state_dir=state,
        read_only_binds=[runtime.interpreter_prefix],
        runtime_binds=binds,
        endpoints=endpoints,
        limits=ctx.sandbox_settings.limits,
    )


def _endpoint(name: str, socket: Path | None, port: int) -> ForwardedEndpoint:
    if socket is None:
        raise OpenHandsUnavailableError(
            f"the {name} serves no unix socket to forward into the sandbox; the OpenHands "
            "loop needs the embedded service (synthorg run / serve)"
        )
    return ForwardedEndpoint(name=name, host_socket=socket, sandbox_port=port)


def _mcp_enabled(ctx: ProvisionContext, setup: RunSetup) -> bool:
    # Credentialed tools exist only for projects configured in [mcp]; others get none.
    configured = ctx.mcp_config.project(setup.record.task.project_id) is not None
    return configured and ctx.mcp_endpoints.uds is not None


def openhands_deps(ctx: ProvisionContext, setup: RunSetup) -> OpenHandsLoopDeps:
    """OpenHandsLoopDeps for one run (raises OpenHandsUnavailableError without a runtime)."""
    runtime = require_runtime(ctx.settings.home)
    launch = launch_for(ctx, setup, runtime)
    config = section(ctx.settings, "openhands", OpenHandsLoopConfig)
    price = section(ctx.settings, "gateway", GatewayConfig).price(setup.record.model)
    probe = SandboxRequest(
        argv=list(launch.argv),
        workspace=launch.workspace,
        state_dir=launch.state_dir,
        conversation_id=setup.record.id,
    )
    persistence = ctx.sandbox.state_path_inside(probe)
    assert persistence is not None, "a state dir was requested"
    mcp_url = None
    if any(e.name == "mcp" for e in launch.endpoints):
        mcp_url = f"http://127.0.0.1:{MCP_PORT}{ctx.mcp_endpoints.path}"
    return OpenHandsLoopDeps(
        conversation_factory=ContainerRuntime(
            ctx.sandbox_pool or ctx.sandbox, launch, idle_timeout_s=config.idle_timeout_s
        ),
        gateway_base_url=f"http://127.0.0.1:{GATEWAY_PORT}/v1",
        mcp_base_url=mcp_url,
        workspace_path=ctx.sandbox.workspace_path_inside(probe),
        persistence_dir=persistence,
        # litellm inside reports cost 0 for an unknown model unless given the gateway's prices.
        input_cost_per_token=float(price.input_per_mtok_usd) / _PER_MTOK,
        output_cost_per_token=float(price.output_per_mtok_usd) / _PER_MTOK,
        config=config,
    )


@asynccontextmanager
async def provision_openhands(
    ctx: ProvisionContext, setup: RunSetup
) -> AsyncIterator[tuple[LoopDependencies, LoopEndpoints]]:
    """The LoopProvisioner body for ``loop_type == "openhands"``.

    The sandbox itself starts (and is torn down) per run inside the loop; nothing here
    outlives the block.
    """
    deps = openhands_deps(ctx, setup)
    yield LoopDependencies(deps), LoopEndpoints(deps.gateway_base_url, deps.mcp_base_url)
