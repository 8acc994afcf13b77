"""``synthorg mcp``: serve the credentialed-tool MCP server standalone."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import typer

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from
from synthorg.cli.gateway import gateway_config
from synthorg.errors import SynthOrgError
from synthorg.gateway.signer import GatewaySigner, load_or_create_key
from synthorg.mcp import CredentialVault, McpConfig, create_mcp_app, serve_mcp
from synthorg.service.store import opened_store
from synthorg.settings import Settings, section

app = typer.Typer(
    help="The credentialed-tool MCP server (git push, pull requests, allow-listed fetch).",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """The credentialed-tool MCP server (git push, pull requests, allow-listed fetch)."""


def mcp_config(settings: Settings) -> McpConfig:
    """The ``[mcp]`` section; key files default to the gateway's key and the data dir."""
    try:
        config = section(settings, "mcp", McpConfig)
        if config.signing_key_path is None:
            # Bearers are minted by the gateway's signer: verify them with the same key.
            key = gateway_config(settings).signing_key_file
            config = config.model_copy(update={"signing_key_path": key})
        if config.vault_path is not None and config.vault_key_path is None:
            config = config.model_copy(
                update={"vault_key_path": settings.home / "keys" / "mcp-vault.key"}
            )
    except SynthOrgError as exc:
        fail(str(exc))
    return config


@app.command()
def serve(
    config: Path | None = ConfigOption,
    host: str = typer.Option("127.0.0.1", help="TCP host to listen on."),
    port: int = typer.Option(8788, help="TCP port (0 picks a free one)."),
    uds: Path | None = typer.Option(None, help="Also serve on this unix socket."),
    no_tcp: bool = typer.Option(False, "--no-tcp", help="Serve only the unix socket."),
) -> None:
    """Serve the MCP endpoint at /mcp until interrupted; every call is audited to the store."""
    settings = settings_from(config)
    mcp = mcp_config(settings)
    if no_tcp and uds is None:
        fail("--no-tcp needs --uds PATH")
    if not mcp.projects:
        fail(
            "no [[mcp.projects]] configured: every tool call would be refused; "
            "add a project to the config"
        )
    assert mcp.signing_key_path is not None
    try:
        vault = CredentialVault.from_config(mcp)
        signer = GatewaySigner(
            load_or_create_key(mcp.signing_key_path),
            # The MCP server only verifies bearers; it never mints, so no model is served.
            served=lambda _provider, _model: False,
            max_ttl_s=gateway_config(settings).token_ttl_s,
        )
    except SynthOrgError as exc:
        fail(str(exc))

    async def main() -> None:
        async with opened_store(settings) as store:
            mcp_app = create_mcp_app(mcp, signer, vault, store)
            async with serve_mcp(
                mcp_app, uds=uds, host=None if no_tcp else host, port=port
            ) as ends:
                where = [str(u) for u in (ends.url, ends.uds) if u]
                console.print(
                    f"mcp listening on {', '.join(where)}", highlight=False, soft_wrap=True
                )
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, stop.set)
                await stop.wait()

    run_async(main())
