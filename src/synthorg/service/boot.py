"""The composition root: settings in, a wired run service (store, gateway, MCP, sandbox) out."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from synthorg.engine import LoopRegistry
from synthorg.errors import ConfigError
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.embedded import Endpoints, serve_embedded
from synthorg.gateway.service import Gateway
from synthorg.gateway.signer import GatewaySigner
from synthorg.localsock import PrivateDirError, private_dir
from synthorg.logging import get_logger
from synthorg.mcp.config import McpConfig
from synthorg.mcp.runner import McpEndpoints, serve_mcp
from synthorg.mcp.vault import CredentialVault
from synthorg.sandbox import BwrapSandbox, SandboxStreamer, make_sandbox
from synthorg.sandbox.pool import SandboxPool
from synthorg.service.config import GateSettings, HostWorkSettings, RunDefaults, SandboxSettings
from synthorg.service.delegation import DelegationHub, DelegationSettings
from synthorg.service.ownership import OwnershipPolicy, sweep_dead_owners
from synthorg.service.provisioning import ProvisionContext, ProvisionerFactory
from synthorg.service.repositories import RepositoryPolicy
from synthorg.service.rundirs import sweep_dead_run_dirs
from synthorg.service.runs import LocalRunService
from synthorg.service.store import store_config
from synthorg.serving import LazyAsgi
from synthorg.settings import Settings, section
from synthorg.store import Store, open_store
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.hostlimits import HostLimits
from synthorg.workspace.mirror import Mirrors
from synthorg.workspace.remote import ProjectsConfig
from synthorg.workspace.worktrees import WorktreeManager

_log = get_logger("synthorg.boot")


@dataclass(frozen=True)
class Components:
    """Everything a process of SynthOrg runs with, wired together."""

    settings: Settings
    store: Store
    gateway: Gateway
    signer: GatewaySigner
    gateway_endpoints: Endpoints
    mcp_endpoints: McpEndpoints
    warm_up: Callable[[], None]
    """Starts the background builds a run may need (the MCP app when [mcp] has projects)."""
    sandbox: SandboxStreamer
    sandbox_settings: SandboxSettings
    worktrees: WorktreeManager
    checkpoints: CheckpointStore
    gate: CommitGate
    registry: LoopRegistry
    service: LocalRunService
    sandbox_pool: SandboxPool | None = None


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.wait([task])  # its own cancellation is not ours to raise


def _socket_dir(home: Path) -> Path:
    # Unix socket paths are capped at 108 bytes: keep them short and per-process.
    run = private_dir(home / "run")
    sweep_dead_run_dirs(run)  # what killed processes left behind
    return private_dir(run / str(os.getpid()))


def _own_dirs(home: Path, key_files: Iterable[Path | None]) -> Path:
    """Check (making what is missing) every dir this process keeps keys or sockets in,
    before anything is read from or put there; returns the socket dir."""
    try:
        for path in key_files:
            if path is not None:
                private_dir(path.parent)
        return _socket_dir(home)
    except PrivateDirError as exc:
        raise ConfigError(
            f"refusing to start: {exc}. Another user could replace what is there (sockets "
            "that receive the runs' bearers, keys that sign them)"
        ) from exc


def _sandbox_pool(
    settings: Settings, sandbox: SandboxStreamer, *, refill: bool
) -> SandboxPool | None:
    from synthorg.engine.openhands.config import OpenHandsLoopConfig

    size = section(settings, "openhands", OpenHandsLoopConfig).pool_size
    if size <= 0 or not isinstance(sandbox, BwrapSandbox):
        return None
    return SandboxPool(sandbox, size, refill=refill)


def warm_pool(ctx: ProvisionContext, pool: SandboxPool) -> None:
    """Start the pool's sandboxes for an OpenHands run (none without a built runtime)."""
    from synthorg.service.openhands import pool_template

    template = pool_template(ctx)
    if template is not None:
        pool.warm(template)


def _isolation_warnings(sandbox: SandboxStreamer) -> list[str]:
    declaration = sandbox.boundary()
    warnings = list(declaration.warnings)
    if declaration.backend == "local":
        warnings.insert(0, "LOCAL backend: NO ISOLATION, the agent runs with this user's access")
    for warning in warnings:
        _log.warning("SANDBOX_WEAKER_THAN_DECLARED", backend=declaration.backend, warning=warning)
    return warnings


def _lazy_mcp_app(
    config: McpConfig, signer: GatewaySigner, vault: CredentialVault, store: Store
) -> LazyAsgi:
    # The MCP server's imports (the ``mcp`` library, ~1 s) load in a worker thread while the
    # process goes on starting; its socket listens from the start and a request that comes
    # before the app is built waits for it. The vault is opened here, so a bad vault or key
    # still fails the boot.
    def build() -> object:
        from synthorg.mcp.server import create_mcp_app

        return create_mcp_app(config, signer, vault, store)

    return LazyAsgi(("synthorg.mcp.server",), build, name="mcp")


def _gateway_config(settings: Settings) -> GatewayConfig:
    """The ``[gateway]`` section; its signing key under the home unless one is named."""
    config = section(settings, "gateway", GatewayConfig)
    if "signing_key_file" not in settings.sections.get("gateway", {}):
        config = config.model_copy(
            update={"signing_key_file": settings.home / "keys" / "gateway-signing.key"}
        )
    return config


def _repositories(
    settings: Settings, policy: RepositoryPolicy, key_files: Iterable[Path | None]
) -> tuple[RepositoryPolicy, Mirrors | None]:
    """The repository rule (the key files refused as repositories) and, with remote
    projects, their mirrors: then worktrees, checkpoints and landings travel."""
    policy = policy.protecting(path for path in key_files if path is not None)
    projects = section(settings, "projects", ProjectsConfig).root
    mirrors = Mirrors(settings.home, projects) if projects else None
    if mirrors is not None:
        policy = policy.with_remote_projects(mirrors.prepare())
    return policy, mirrors


async def _store(stack: AsyncExitStack, settings: Settings, store: Store | None) -> Store:
    """The caller's store, or the configured one, closed with the stack."""
    if store is not None:
        return store
    opened = await open_store(store_config(settings))
    stack.push_async_callback(opened.close)
    return opened


def _sweep(stack: AsyncExitStack, store: Store, ownership: OwnershipPolicy) -> None:
    """Dead owners' runs are reconciled by whoever is alive, at boot and every renewal."""
    sweeper = asyncio.create_task(
        sweep_dead_owners(store, ownership.lease_s / 3), name="ownership-sweep"
    )
    stack.push_async_callback(_stopped, sweeper)


@dataclass(frozen=True)
class _Served:
    """The gateway and the MCP server, serving in this process."""

    gateway: Gateway
    gateway_endpoints: Endpoints
    mcp_app: LazyAsgi
    mcp_endpoints: McpEndpoints


async def _serve(
    stack: AsyncExitStack,
    *,
    gateway_config: GatewayConfig,
    mcp_config: McpConfig,
    signer: GatewaySigner,
    store: Store,
    sockets: Path,
) -> _Served:
    """Serve the gateway and the MCP server on unix sockets only (0600): reached by this
    process and, forwarded, by sandboxes; stopped with the stack."""
    gateway_app = create_gateway_app(gateway_config, signer, store)
    gateway_endpoints = await stack.enter_async_context(
        serve_embedded(gateway_app, uds=sockets / "gateway.sock")
    )
    mcp_app = _lazy_mcp_app(mcp_config, signer, CredentialVault.from_config(mcp_config), store)
    mcp_endpoints = await stack.enter_async_context(
        serve_mcp(mcp_app, uds=sockets / "mcp.sock", host=None)
    )
    return _Served(gateway_app.gateway, gateway_endpoints, mcp_app, mcp_endpoints)


def _pool(
    stack: AsyncExitStack,
    settings: Settings,
    sandbox: SandboxStreamer,
    openhands_pool: Literal["none", "once", "kept"],
) -> SandboxPool | None:
    """The OpenHands sandbox pool asked for, closed after the service's shutdown (LIFO)."""
    if openhands_pool == "none":
        return None
    pool = _sandbox_pool(settings, sandbox, refill=openhands_pool == "kept")
    if pool is not None:
        stack.push_async_callback(pool.close)
    return pool


def _warm_up(
    mcp_config: McpConfig, mcp_app: LazyAsgi, pool: SandboxPool | None, ctx: ProvisionContext
) -> None:
    if mcp_config.projects:  # with no project in [mcp], no run ever connects
        mcp_app.warm()
    if pool is not None:
        warm_pool(ctx, pool)


def _commit_gate(gate_settings: GateSettings, mirrors: Mirrors | None) -> CommitGate:
    return CommitGate(
        gate_settings.author_name,
        gate_settings.author_email,
        secret_patterns=gate_settings.secret_patterns,
        max_file_bytes=gate_settings.max_file_bytes,
        max_changed_files=gate_settings.max_changed_files,
        publisher=mirrors,
        diffstat=False,  # nothing here reads it: `synthorg run` asks the repository itself
    )


@asynccontextmanager
async def boot(
    settings: Settings,
    *,
    registry: LoopRegistry,
    provisioner: ProvisionerFactory,
    store: Store | None = None,
    repositories: RepositoryPolicy | None = None,
    ownership: OwnershipPolicy | None = None,
    warm_mcp: bool = True,
    openhands_pool: Literal["none", "once", "kept"] = "none",
) -> AsyncIterator[Components]:
    """Open the store, serve the gateway and MCP server in-process, and build the service.

    ``repositories`` defaults to the terminal's policy (the data dir refused, any other path
    the caller names); a server passes ``RepositoryPolicy.for_server``. ``ownership``
    (workers): the run lease, and fencing of runs another process took over.
    ``warm_mcp=False`` leaves building the MCP app to ``Components.warm_up()`` (a server
    calls it once it listens, so the build does not compete with its start-up) or to the
    first MCP request. ``openhands_pool``: start ``[openhands] pool_size`` sandboxes for
    OpenHands runs when the MCP app is warmed: ``"once"`` (``run --loop openhands``: they
    serve and are not replaced) or ``"kept"`` (``serve``: each used one is replaced).
    """
    gateway_config = _gateway_config(settings)
    mcp_config = section(settings, "mcp", McpConfig)
    key_files = (
        gateway_config.signing_key_file,
        mcp_config.signing_key_path,
        mcp_config.vault_path,
        mcp_config.vault_key_path,
    )
    repositories, mirrors = _repositories(
        settings, repositories or RepositoryPolicy(home=settings.home), key_files
    )
    sandbox_settings = section(settings, "sandbox", SandboxSettings)
    gate_settings = section(settings, "gate", GateSettings)
    defaults = section(settings, "run", RunDefaults)
    sockets = _own_dirs(settings.home, key_files)
    sandbox = make_sandbox(
        sandbox_settings.backend, allow_local=sandbox_settings.allow_local, owner=settings.home
    )
    async with AsyncExitStack() as stack:
        store = await _store(stack, settings, store)
        ownership = ownership or OwnershipPolicy(lease_s=store_config(settings).run_lease_s)
        _sweep(stack, store, ownership)
        signer = signer_for(gateway_config)
        served = await _serve(
            stack,
            gateway_config=gateway_config,
            mcp_config=mcp_config,
            signer=signer,
            store=store,
            sockets=sockets,
        )
        pool = _pool(stack, settings, sandbox, openhands_pool)
        host_limits = HostLimits(gate_settings.max_file_bytes, gate_settings.max_changed_files)
        checkpoints = CheckpointStore(publisher=mirrors, limits=host_limits)
        delegation = DelegationHub(
            section(settings, "delegation", DelegationSettings),
            store=store,
            gateway=served.gateway,
            checkpoints=checkpoints,
        )
        provision_context = ProvisionContext(
            settings=settings,
            sandbox=sandbox,
            sandbox_settings=sandbox_settings,
            signer=signer,
            gateway_endpoints=served.gateway_endpoints,
            mcp_endpoints=served.mcp_endpoints,
            mcp_config=mcp_config,
            checkpoints=checkpoints,
            delegation=delegation,
            sandbox_pool=pool,
        )
        warm_up = partial(_warm_up, mcp_config, served.mcp_app, pool, provision_context)
        if warm_mcp:
            warm_up()
        provision = provisioner(provision_context)
        worktrees = WorktreeManager(settings.home, mirrors=mirrors)
        gate = _commit_gate(gate_settings, mirrors)
        service = LocalRunService(
            store=store,
            gateway=served.gateway,
            worktrees=worktrees,
            gate=gate,
            registry=registry,
            provision=provision,
            engine=settings.engine,
            defaults=defaults,
            isolation_warnings=_isolation_warnings(sandbox),
            repositories=repositories,
            ownership=ownership,
            checkpoints=checkpoints,
            settle_dead=sandbox.settle_dead if isinstance(sandbox, BwrapSandbox) else None,
            host_work=section(settings, "limits", HostWorkSettings),
        )
        delegation.bind(service)
        stack.push_async_callback(service.shutdown)
        _log.info(
            "SYNTHORG_BOOTED",
            home=str(settings.home),
            sandbox=sandbox.name,
            gateway=str(served.gateway_endpoints.uds_path),
            mcp=str(served.mcp_endpoints.uds),
            loops=sorted(registry.buildable),
        )
        yield Components(
            settings=settings,
            store=store,
            gateway=served.gateway,
            signer=signer,
            gateway_endpoints=served.gateway_endpoints,
            mcp_endpoints=served.mcp_endpoints,
            warm_up=warm_up,
            sandbox=sandbox,
            sandbox_settings=sandbox_settings,
            worktrees=worktrees,
            checkpoints=checkpoints,
            gate=gate,
            registry=registry,
            service=service,
            sandbox_pool=pool,
        )
