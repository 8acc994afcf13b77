"""Shared CLI plumbing: the console, settings loading, error reporting, async entry."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from synthorg.errors import SynthOrgError
from synthorg.settings import Settings, load_settings

console = Console()
err_console = Console(stderr=True)


def settings_from(config: Path | None) -> Settings:
    """Settings for a command, exiting with a clear message when they are invalid."""
    try:
        return load_settings(config)
    except SynthOrgError as exc:
        fail(str(exc))


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error the operator can act on and exit."""
    err_console.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def run_async[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, turning SynthOrg errors into clean CLI failures."""
    try:
        return asyncio.run(coro)
    except SynthOrgError as exc:
        fail(str(exc))


ConfigOption = typer.Option(
    None, "--config", "-c", help="TOML config file (default: $SYNTHORG_CONFIG or built-in)."
)
