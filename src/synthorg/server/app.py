"""The FastAPI application: routes, auth, error mapping, metrics and the lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI

from synthorg.logging import get_logger
from synthorg.server.config import ServerSettings
from synthorg.server.console import install_console
from synthorg.server.errors import install_error_handlers
from synthorg.server.http_limits import HttpLimits
from synthorg.server.list_stream import LIST_WS_PROTOCOL
from synthorg.server.metrics import ObserveRequests, ServerMetrics
from synthorg.server.routes import control, conversations, events, git, keys, ops, ws
from synthorg.server.routes import forge as forge_routes
from synthorg.server.state import Authenticator, ServerState, ServerStore
from synthorg.server.stream import WS_PROTOCOL
from synthorg.service.protocol import RunService
from synthorg.service.repositories import RepositoryPolicy

if TYPE_CHECKING:  # the hub (mcp, httpx) is imported only by a serve with [forge] projects
    from synthorg.forge.hub import ForgeHub

log = get_logger("synthorg.server")


def create_app(
    settings: ServerSettings,
    *,
    store: ServerStore,
    run_service: RunService,
    auth: Authenticator,
    on_started: Callable[[], None] | None = None,
    after_shutdown: Callable[[], Awaitable[None]] | None = None,
    forge: ForgeHub | None = None,
    repositories: RepositoryPolicy | None = None,
) -> FastAPI:
    """The agent server app.

    On start-up it reconciles the store (conversations a dead process left running become
    error, their open tool calls get an error observation); on shutdown it stops every
    active run with SHUTDOWN, leaving the conversations resumable. ``on_started`` runs once
    start-up is done (background warm-ups that should not delay it); ``after_shutdown`` is
    awaited once the runs have stopped (the last moment the process is sure to live: uvicorn
    re-raises a SIGTERM right after). ``forge`` serves forge webhooks; its processor drains
    the queued deliveries in the background while the app runs. ``repositories`` is the rule
    the console's repository list applies (the one the runs are checked by). The store and
    the service belong to the caller, who closes them after the app has stopped.
    """
    state = ServerState(
        settings=settings,
        store=store,
        service=run_service,
        auth=auth,
        metrics=ServerMetrics(),
        forge=forge,
        repositories=repositories,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.reconcile_on_start:
            report = await store.reconcile_after_restart()
            log.info(
                "SERVER_RECONCILED",
                conversations_interrupted=list(report.conversations_interrupted),
                actions_reconciled=len(report.actions_reconciled),
            )
        log.info("SERVER_STARTED")
        if on_started is not None:
            on_started()
        background = AsyncExitStack()
        if forge is not None:
            await background.enter_async_context(forge.running())
        try:
            yield
        finally:
            await background.aclose()  # no delivery starts a run once shutdown began
            log.info("SERVER_SHUTDOWN")
            await run_service.shutdown()
            if after_shutdown is not None:
                await after_shutdown()

    app = FastAPI(
        title="SynthOrg agent server",
        version="1",
        description="Conversations, run control, confirmation, event history and live tail. "
        "Send `Authorization: Bearer <API key>` on every /api route.\n"
        + WS_PROTOCOL
        + LIST_WS_PROTOCOL,
        lifespan=lifespan,
    )
    app.state.server = state
    install_error_handlers(app)
    for module in (ops, conversations, control, events, git, keys, ws, forge_routes):
        app.include_router(module.router)
    app.add_middleware(HttpLimits, openapi=app.openapi, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(ObserveRequests, metrics=state.metrics)
    install_console(app, state)  # the web console at /: cookie sessions, headers, assets
    return app
