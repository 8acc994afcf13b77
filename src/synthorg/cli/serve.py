"""``synthorg serve``: the agent server (REST + WebSocket) and ``synthorg serve keys`` admin."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from
from synthorg.errors import SynthOrgError
from synthorg.logging import get_logger
from synthorg.server import KeyStore, Role, ServerSettings, create_app
from synthorg.settings import Settings, section

if TYPE_CHECKING:
    import uvicorn

    from synthorg.distributed.config import DistributedConfig
    from synthorg.forge.hub import ForgeHub
    from synthorg.service.protocol import RunService
    from synthorg.store.protocol import Store

log = get_logger("synthorg.server")

keys = typer.Typer(help="API keys of the agent server: create, list, revoke.", no_args_is_help=True)


def server_settings(settings: Settings) -> ServerSettings:
    """The ``[server]`` section, exiting with a clear message when it is invalid."""
    try:
        return section(settings, "server", ServerSettings)
    except SynthOrgError as exc:
        fail(str(exc))


def key_store(settings: Settings) -> KeyStore:
    """The key file of this data dir (or the one ``[server] keys_file`` names)."""
    return KeyStore(server_settings(settings).resolved_keys_file(settings.home))


def serve(
    ctx: typer.Context,
    host: str | None = typer.Option(
        None, help="Interface (default: server.host in the config, 127.0.0.1)."
    ),
    port: int | None = typer.Option(
        None, help="TCP port (default: server.port in the config, 8420; 0: any)."
    ),
    config: Path | None = ConfigOption,
) -> None:
    """Serve the agent server: conversations, run control, confirmation, live events."""
    if ctx.invoked_subcommand is not None:
        return  # `synthorg serve keys ...`
    settings = settings_from(config)
    wanted = server_settings(settings)
    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    try:
        from synthorg.distributed.config import distributed_config

        engine = distributed_config(settings)
    except SynthOrgError as exc:
        fail(str(exc))
    run_async(_serve(settings, wanted.model_copy(update=overrides), temporal=engine))


async def _serve(
    settings: Settings, wanted: ServerSettings, *, temporal: DistributedConfig
) -> None:
    auth = KeyStore(wanted.resolved_keys_file(settings.home))
    policy = wanted.repository_policy(settings)
    if not any(key.revoked_at is None for key in auth.list()):
        log.warning(
            "SERVER_NO_KEYS",
            hint="no API key yet: `synthorg serve keys create NAME --role admin`",
        )
    if temporal.engine == "temporal":
        # Runs are workflows on workers (and temporalio is imported only on this path).
        from synthorg.distributed.serve import temporal_service

        async with temporal_service(settings, temporal) as (store, service):
            # Workers reconcile the runs they take over; the server must not touch them.
            no_reconcile = wanted.model_copy(update={"reconcile_on_start": False})
            app = create_app(
                no_reconcile,
                store=store,
                run_service=service,
                auth=auth,
                repositories=policy,  # the workers check runs by the same config
            )
            await _uvicorn(app, wanted)
        return

    from synthorg.server.local import Followers, create_local_app, serve_local
    from synthorg.service.boot import boot
    from synthorg.service.loops import default_provisioner, default_registry

    async with boot(
        settings,
        registry=default_registry(),
        provisioner=default_provisioner,
        repositories=policy,
        warm_mcp=False,
        openhands_pool="kept",
    ) as components:
        started = asyncio.Event()

        def on_started() -> None:
            started.set()  # the local socket answers from now on (reconciliation is done)
            components.warm_up()

        # `synthorg run` on this host hands its run here (the local operator's socket).
        followers = Followers()
        local = create_local_app(
            components.service,
            components.store,
            sandbox=components.sandbox.name,
            ready=started,
            followers=followers,
            max_body_bytes=wanted.max_body_bytes,
        )
        app = create_app(
            wanted,
            store=components.store,
            run_service=components.service,
            auth=auth,
            on_started=on_started,
            after_shutdown=followers.gone,
            forge=forge_hub(settings, components.store, components.service),
            repositories=policy,
        )
        async with serve_local(settings.home, local):
            await _uvicorn(app, wanted)


def forge_hub(settings: Settings, store: Store, service: RunService) -> ForgeHub | None:
    """The forge webhooks of ``[forge]``, None when it names no project."""
    from synthorg.forge.config import ForgeSettings
    from synthorg.forge.hub import ForgeHub, project_sites, project_stages
    from synthorg.mcp.config import McpConfig

    forge = section(settings, "forge", ForgeSettings)
    if not forge.projects:
        return None
    mcp = section(settings, "mcp", McpConfig)
    stages = project_stages(forge, mcp, os.environ)
    sites = project_sites(forge, mcp)
    return ForgeHub.build(forge, os.environ, store, service, stages=stages, sites=sites)


def uvicorn_config(app: object, wanted: ServerSettings) -> uvicorn.Config:
    """How ``synthorg serve`` runs the app under uvicorn."""
    import uvicorn

    from synthorg.server.websocket_protocol import ClosingSafeWebSocketProtocol

    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=wanted.host,
        port=wanted.port,
        lifespan="on",
        ws=ClosingSafeWebSocketProtocol,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=30,
        # uvicorn trusts 127.0.0.1's X-Forwarded-For by default: any local process (or a
        # client through a local tunnel) could then pick its address and slip past the
        # per-address sign-in limit. Only the proxies the operator names are trusted.
        proxy_headers=bool(wanted.forwarded_allow_ips),
        forwarded_allow_ips=list(wanted.forwarded_allow_ips) or None,
    )


async def _uvicorn(app: object, wanted: ServerSettings) -> None:
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, wanted))
    # uvicorn installs SIGINT/SIGTERM handlers: both end in the lifespan's shutdown, which
    # stops active runs with SHUTDOWN (resumable; with Temporal, runs go on on workers).
    await server.serve()


@keys.command("create")
def create_key(
    principal: str = typer.Argument(..., help="Who the key authenticates (recorded in events)."),
    role: list[Role] = typer.Option(..., "--role", help="viewer, operator, approver, admin."),
    project: list[str] = typer.Option(
        [], "--project", help="Scope the key to this project (repeatable; default: all)."
    ),
    config: Path | None = ConfigOption,
) -> None:
    """Make a key; it is printed once and never stored in clear."""
    store = key_store(settings_from(config))
    try:
        record, key = store.create(principal, set(role), project)
    except SynthOrgError as exc:
        fail(str(exc))
    console.print(f"key id [bold]{record.id}[/] for {record.principal} ({', '.join(record.roles)})")
    console.print("send it as 'Authorization: Bearer <key>'; it is not shown again:")
    print(key)


@keys.command("list")
def list_keys(config: Path | None = ConfigOption) -> None:
    """Every key: id, principal, roles, created, revoked."""
    table = Table("id", "principal", "roles", "created", "revoked")
    for key in key_store(settings_from(config)).list():
        table.add_row(
            key.id,
            key.principal,
            ",".join(key.roles),
            key.created_at.isoformat(timespec="seconds"),
            key.revoked_at.isoformat(timespec="seconds") if key.revoked_at else "",
        )
    console.print(table)


@keys.command("revoke")
def revoke_key(
    key_id: str = typer.Argument(..., help="The key id (see `synthorg serve keys list`)."),
    config: Path | None = ConfigOption,
) -> None:
    """Revoke a key; a running server refuses it from the next request on."""
    try:
        record = key_store(settings_from(config)).revoke(key_id)
    except SynthOrgError as exc:
        fail(str(exc))
    console.print(f"revoked {record.id} ({record.principal})")


app = typer.Typer(
    help="The agent server: REST + WebSocket run control (and its API keys).",
    invoke_without_command=True,
)
"""``synthorg serve`` with ``keys`` beneath it: register with ``add_typer(app, name="serve")``."""
app.callback(invoke_without_command=True)(serve)
app.add_typer(keys, name="keys")
