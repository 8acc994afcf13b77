"""The ``synthorg`` command: one typer app, one module per command group."""

from __future__ import annotations

from pathlib import Path

import typer

from synthorg.cli import conversations
from synthorg.cli import doctor as doctor_checks
from synthorg.cli.common import ConfigOption, settings_from

app = typer.Typer(
    name="synthorg",
    help="SynthOrg: a self-hosted control plane for autonomous coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.add_typer(conversations.app, name="conversations")


@app.callback()
def _root() -> None:
    """SynthOrg: a self-hosted control plane for autonomous coding agents."""


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
