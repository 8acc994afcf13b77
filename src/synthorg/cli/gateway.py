"""``synthorg gateway``: serve the LLM gateway standalone, mint a bearer for manual use."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import signal
import sys
from collections.abc import Coroutine
from decimal import Decimal
from pathlib import Path
from typing import Any

import typer

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from
from synthorg.domain.binding import RunBinding
from synthorg.errors import SynthOrgError
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.service.store import opened_store
from synthorg.settings import Settings, section

app = typer.Typer(help="The LLM gateway: serve it, mint per-run bearers.", no_args_is_help=True)


def gateway_config(settings: Settings) -> GatewayConfig:
    """The ``[gateway]`` section; the key file defaults into the settings' data dir."""
    try:
        config = section(settings, "gateway", GatewayConfig)
    except SynthOrgError as exc:
        fail(str(exc))
    if "signing_key_file" not in settings.sections.get("gateway", {}):
        key_file = settings.home / "keys" / "gateway-signing.key"
        config = config.model_copy(update={"signing_key_file": key_file})
    return config


def _access_log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("synthorg.gateway.access")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _run_fast(coro: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when installed (the gateway's hot path is loop-bound)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        run_async(coro)
        return
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(coro)
    except SynthOrgError as exc:
        fail(str(exc))


@app.command()
def serve(
    config: Path | None = ConfigOption,
    host: str | None = typer.Option(None, help="TCP host (default from config: 127.0.0.1)."),
    port: int | None = typer.Option(None, help="TCP port (default from config: 8787)."),
    uds: Path | None = typer.Option(None, help="Also serve on this unix socket."),
    no_tcp: bool = typer.Option(False, "--no-tcp", help="Serve only the unix socket."),
) -> None:
    """Serve the gateway until interrupted (JSON access log on stderr)."""
    settings = settings_from(config)
    gw_config = gateway_config(settings)
    uds = uds or gw_config.unix_socket
    if no_tcp and uds is None:
        fail("--no-tcp needs --uds PATH (or gateway.unix_socket in the config)")
    _access_log_to_stderr()

    async def main() -> None:
        async with opened_store(settings) as store:
            gateway_app = create_gateway_app(gw_config, signer_for(gw_config), store)
            async with serve_embedded(
                gateway_app,
                uds=uds,
                tcp_port=None if no_tcp else (gw_config.port if port is None else port),
                host=host or gw_config.host,
                log_level="info",
            ) as endpoints:
                where = [u for u in (endpoints.tcp_base_url, endpoints.uds_path) if u]
                console.print(f"gateway listening on {', '.join(map(str, where))}", highlight=False)
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, stop.set)
                await stop.wait()  # then the socket closes and the UDS file is removed

    _run_fast(main())


@app.command()
def mint(
    model: str = typer.Option(..., "--model", help="Model id the bearer is bound to."),
    provider: str | None = typer.Option(None, help="Provider (default: the one serving --model)."),
    execution: str | None = typer.Option(None, "--execution", help="Execution id (default: new)."),
    ceiling: Decimal | None = typer.Option(None, "--ceiling", help="Cost ceiling in USD."),
    ttl: int | None = typer.Option(
        None, help="Lifetime in seconds (default and most: [gateway] token_ttl_s)."
    ),
    agent: str = typer.Option("manual", help="Agent id."),
    task: str = typer.Option("manual", help="Task id."),
    project: str = typer.Option("manual", help="Project id."),
    conversation: str | None = typer.Option(None, help="Conversation id (default: new)."),
    as_json: bool = typer.Option(False, "--json", help="Print the binding and bearer as JSON."),
    config: Path | None = ConfigOption,
) -> None:
    """Open an execution in this store's ledger and print its bearer, for manual use.

    Issued the way a run's is (the model served by the named provider, the lifetime at most
    [gateway] token_ttl_s, the ledger row opened first). It is good for model calls at a
    gateway over this store until its lifetime ends or the execution is finished; no run owns
    it, so no lease ends it earlier. The MCP server refuses it unless --conversation and
    --project name a conversation recorded in this store.
    """
    settings = settings_from(config)
    gw_config = gateway_config(settings)
    try:
        provider = provider or gw_config.provider_for(model)
    except SynthOrgError as exc:
        fail(str(exc))
    binding = RunBinding(
        execution_id=execution or f"exec-manual-{secrets.token_hex(6)}",
        agent_id=agent,
        task_id=task,
        project_id=project,
        conversation_id=conversation or f"conv-manual-{secrets.token_hex(6)}",
        provider=provider,
        model_id=model,
        cost_ceiling=ceiling,
    )

    async def issued() -> str:
        # The bearer is valid only at the ledger that opened its execution (this store's).
        async with opened_store(settings) as store:
            app = create_gateway_app(gw_config, signer_for(gw_config), store, providers={})
            return await app.gateway.issue(binding, ttl_s=ttl)

    token = run_async(issued())
    if as_json:
        print(json.dumps({"bearer": token, **binding.model_dump(mode="json")}))
    else:
        print(token)
