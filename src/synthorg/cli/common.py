"""Shared CLI plumbing: the consoles, settings loading, error reporting, async entry.

Importing this module is cheap (typer only): the rich consoles are made on first use, the
settings module when a command loads them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from synthorg.cli.problems import environment_problem
from synthorg.cli.untrusted import visible

if TYPE_CHECKING:
    from rich.console import Console

    from synthorg.settings import Settings

DEBUG_ENV = "SYNTHORG_DEBUG"
"""Set to 1 to get tracebacks instead of one-line environment errors."""


@cache
def _console(stderr: bool) -> Console:
    from rich.console import Console

    return Console(stderr=stderr)


def __getattr__(name: str) -> Console:
    # `console` and `err_console` are made on first use (rich costs import time).
    if name == "console":
        return _console(False)
    if name == "err_console":
        return _console(True)
    raise AttributeError(name)


def settings_from(config: Path | None) -> Settings:
    """Settings for a command, exiting with a clear message when they are invalid."""
    from synthorg.errors import SynthOrgError
    from synthorg.settings import load_settings

    try:
        return load_settings(config)
    except SynthOrgError as exc:
        fail(str(exc))


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error the operator can act on and exit (the message may carry untrusted text)."""
    from rich.text import Text

    line = Text("error: ", style="bold red")
    line.append(visible(message))
    _console(True).print(line, soft_wrap=True)
    raise typer.Exit(code)


def run_async[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, turning SynthOrg errors and environment problems into clean failures."""
    import asyncio

    from synthorg.errors import SynthOrgError

    with environment_failures():
        try:
            return asyncio.run(coro)
        except SynthOrgError as exc:
            fail(str(exc))


@contextmanager
def environment_failures() -> Iterator[None]:
    """Host problems (permissions, read-only or full disk, the store) end in one line, exit 2."""
    try:
        yield
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as exc:
        problem = environment_problem(exc)
        if problem is None or os.environ.get(DEBUG_ENV):
            raise
        fail(problem)


@contextmanager
def main_guard() -> Iterator[None]:
    """Around the whole CLI: Ctrl-C at any point (even while importing) prints no traceback."""
    try:
        with environment_failures():
            yield
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None


ConfigOption = typer.Option(
    None, "--config", "-c", help="TOML config file (default: $SYNTHORG_CONFIG or built-in)."
)
