"""The ``synthorg`` command: one typer app, one module per command group."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from synthorg.cli import conversations
from synthorg.cli import doctor as doctor_checks
from synthorg.cli import eval as eval_cli
from synthorg.cli import gateway as gateway_cli
from synthorg.cli import mcp as mcp_cli
from synthorg.cli import runtime as runtime_cli
from synthorg.cli import sandbox as sandbox_cli
from synthorg.cli.common import ConfigOption, settings_from
from synthorg.cli.demo import demo as demo_command
from synthorg.cli.run import run as run_command
from synthorg.cli.serve import app as serve_app
from synthorg.logging import configure_logging

app = typer.Typer(
    name="synthorg",
    help="SynthOrg: a self-hosted control plane for autonomous coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.add_typer(conversations.app, name="conversations")
app.add_typer(mcp_cli.app, name="mcp")
app.add_typer(gateway_cli.app, name="gateway")
app.add_typer(runtime_cli.app, name="runtime")
app.add_typer(sandbox_cli.app, name="sandbox")
app.add_typer(eval_cli.app, name="eval")
app.command("run")(run_command)
app.command("demo")(demo_command)
app.add_typer(serve_app, name="serve")


@app.callback()
def _root() -> None:
    """SynthOrg: a self-hosted control plane for autonomous coding agents."""
    # Interactive commands print for people; structured logs only at WARNING unless asked.
    configure_logging(os.environ.get("SYNTHORG_LOG_LEVEL", "WARNING"))


@app.command()
def doctor(config: Path | None = ConfigOption) -> None:
    """Check this host: python, git, bubblewrap, the store, runtimes."""
    settings = settings_from(config)
    results = doctor_checks.run_checks(settings, doctor_checks.DEFAULT_CHECKS)
    doctor_checks.render(results)
    if any(result.level is doctor_checks.Level.FAIL for result in results):
        raise typer.Exit(1)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
