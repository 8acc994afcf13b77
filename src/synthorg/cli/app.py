"""The ``synthorg`` command: one typer app whose commands are imported only when used.

``synthorg --help`` imports typer and this module, nothing else: each command lives in its
own module and is loaded by name when it runs (or when its own ``--help`` is asked for), so
a command pays only for what it uses (issue 16: fastapi, mcp, psycopg, uvicorn and httpx
cost seconds). Help is plain text: rich-formatted help alone costs more than the budget.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import typer
from typer import main as typer_main
from typer.core import TyperGroup

from synthorg.cli.common import ConfigOption

COMMANDS: dict[str, tuple[str, str]] = {
    "conversations": ("synthorg.cli.conversations:app", "Inspect conversations and their logs."),
    "demo": ("synthorg.cli.demo:demo", "Fix a failing test in a sample repo, end to end."),
    "eval": ("synthorg.cli.eval:app", "A/B loops over a task suite; promote the winner."),
    "forge": ("synthorg.cli.forge:app", "Forge webhooks: replay a delivery, list deliveries."),
    "gateway": ("synthorg.cli.gateway:app", "The LLM gateway: serve it, mint per-run bearers."),
    "init": ("synthorg.cli.init:init", "Write a commented synthorg.toml for a repository."),
    "mcp": ("synthorg.cli.mcp:app", "The credentialed-tool MCP server."),
    "run": ("synthorg.cli.run:run", "Run a task on a repository: worktree, sandbox, loop, gate."),
    "runtime": ("synthorg.cli.runtime:app", "Isolated runtimes: build them, show their status."),
    "sandbox": ("synthorg.cli.sandbox:app", "Sandbox backends: boundary table and a live check."),
    "serve": ("synthorg.cli.serve:app", "The agent server: REST + WebSocket run control."),
    "worker": ("synthorg.cli.worker:worker", "A Temporal worker: runs handed out by Temporal."),
}
"""Command name -> ("module:attribute", one-line help shown by ``synthorg --help``)."""


def load_command(name: str) -> Any:
    """The click command behind ``name``, importing its module now."""
    module, _, attribute = COMMANDS[name][0].partition(":")
    target = getattr(importlib.import_module(module), attribute)
    if not isinstance(target, typer.Typer):
        single = typer.Typer()
        single.command(name)(target)
        target = single
    command = typer_main.get_command(target)
    command.name = name
    _plain_help(command)
    return command


def _plain_help(command: Any) -> None:
    command.rich_markup_mode = None
    for child in getattr(command, "commands", {}).values():
        _plain_help(child)


class _LazyGroup(TyperGroup):
    """A group that imports a command's module only when that command is resolved."""

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [
            (name, COMMANDS[name][1] if name in COMMANDS else self._short_help(ctx, name))
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _short_help(self, ctx: Any, name: str) -> str:
        command = super().get_command(ctx, name)
        return command.get_short_help_str(80) if command is not None else ""


app = typer.Typer(
    name="synthorg",
    help="SynthOrg: a self-hosted control plane for autonomous coding agents.",
    cls=_LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """SynthOrg: a self-hosted control plane for autonomous coding agents."""
    from synthorg.logging import configure_logging

    # Interactive commands print for people; structured logs only at WARNING unless asked.
    configure_logging(os.environ.get("SYNTHORG_LOG_LEVEL", "WARNING"))


@app.command()
def doctor(config: Path | None = ConfigOption) -> None:
    """Check this host: python, git, bubblewrap, the store, runtimes."""
    from synthorg.cli import doctor as doctor_checks
    from synthorg.cli.common import settings_from

    settings = settings_from(config)
    results = doctor_checks.run_checks(settings, doctor_checks.DEFAULT_CHECKS)
    doctor_checks.render(results)
    if any(result.level is doctor_checks.Level.FAIL for result in results):
        raise typer.Exit(1)


def main() -> None:
    """Console-script entry point."""
    from synthorg.cli.common import main_guard

    with main_guard():
        app()


if __name__ == "__main__":
    main()
