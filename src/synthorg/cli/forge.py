"""``synthorg forge``: replay a saved delivery to a running serve (signed), list deliveries."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import typer
from rich.table import Table

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from
from synthorg.cli.untrusted import untrusted

app = typer.Typer(help="Forge webhooks: replay a delivery, list what deliveries did.")


@app.command()
def replay(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="A delivery's JSON body."),
    project: str = typer.Option(..., help="The project whose webhook receives it."),
    event: str | None = typer.Option(
        None, help="X-GitHub-Event (default: the file name's first part, e.g. issues)."
    ),
    delivery: str | None = typer.Option(None, help="X-GitHub-Delivery (default: a new id)."),
    url: str | None = typer.Option(None, help="The serve's base URL (default: [server])."),
    config: Path | None = ConfigOption,
) -> None:
    """POST ``file`` to the serve's webhook, signed with the project's secret from this
    environment (the variable its ``webhook_secret_env`` names), and print the answer."""
    import httpx

    from synthorg.cli.serve import server_settings
    from synthorg.forge.config import ForgeSettings
    from synthorg.forge.signature import sign
    from synthorg.settings import section

    settings = settings_from(config)
    forge = section(settings, "forge", ForgeSettings).projects.get(project)
    if forge is None:
        fail(f"[forge.projects.{project}] is not configured")
    secret = os.environ.get(forge.webhook_secret_env, "")
    if not secret:
        fail(f"{forge.webhook_secret_env} (the webhook secret) is not set in this environment")
    body = file.read_bytes()
    json.loads(body)  # refuse a file that is not JSON before sending it
    server = server_settings(settings)
    base = url or f"http://{server.host}:{server.port}"
    headers = {
        "content-type": "application/json",
        "x-github-event": event or file.name.split(".", 1)[0],
        "x-github-delivery": delivery or f"replay-{secrets.token_hex(8)}",
        "x-hub-signature-256": sign(body, secret),
        "user-agent": "synthorg-forge-replay",
    }
    try:
        answer = httpx.post(
            f"{base}/api/forge/{project}/webhook", content=body, headers=headers, timeout=15
        )
    except httpx.HTTPError as exc:
        fail(f"cannot reach the serve at {base}: {exc}")
    console.print(untrusted(f"{answer.status_code} {answer.text}"))
    if answer.status_code >= 400:
        raise typer.Exit(1)


@app.command()
def status(
    project: str | None = typer.Option(None, help="Only this project."),
    limit: int = typer.Option(20, min=1, max=1000, help="How many deliveries."),
    config: Path | None = ConfigOption,
) -> None:
    """Recent deliveries, newest first, and what each did."""
    from synthorg.service.store import opened_store

    settings = settings_from(config)

    async def go() -> None:
        async with opened_store(settings) as store:
            rows = await store.recent_deliveries(limit, project_id=project)
        table = Table(
            "received", "delivery", "project", "event", "#", "state", "conversation", "outcome"
        )
        for row in rows:
            table.add_row(
                row.received_at.strftime("%Y-%m-%d %H:%M:%S"),
                untrusted(row.delivery_id),
                row.project_id,
                untrusted(row.event),
                "" if row.issue is None else str(row.issue),
                row.state.value,
                row.conversation_id or "",
                untrusted(row.outcome),
            )
        console.print(table)

    run_async(go())
