"""``synthorg runtime``: build and inspect the isolated runtimes (the OpenHands SDK venv)."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from synthorg.cli.common import ConfigOption, console, fail, settings_from
from synthorg.errors import SynthOrgError
from synthorg.runtime.openhands import build_runtime, runtime_status

app = typer.Typer(help="Isolated runtimes: build them, show their status.", no_args_is_help=True)


class RuntimeName(StrEnum):
    """Runtimes SynthOrg knows how to build."""

    openhands = "openhands"


@app.command()
def build(
    name: RuntimeName = typer.Argument(..., help="Which runtime to build."),
    config: Path | None = ConfigOption,
    force: bool = typer.Option(False, "--force", help="Rebuild even if already built."),
    python: Path | None = typer.Option(
        None, "--python", help="CPython 3.12 to build from (default: this interpreter's base)."
    ),
) -> None:
    """Build a runtime venv into the data dir from its hash-pinned lockfile."""
    settings = settings_from(config)
    started = time.monotonic()
    console.print(f"[bold]Building the {name.value} runtime[/] under {settings.home}")
    try:
        runtime = build_runtime(
            settings.home,
            lambda line: console.print(f"[dim]{escape(line)}[/]", highlight=False),
            base_python=python,
            force=force,
        )
    except SynthOrgError as exc:
        fail(str(exc), code=1)
    _prepare_view(runtime.venv_path)
    console.print(
        f"[green]ready[/] {name.value} runtime {runtime.lock_hash} in "
        f"{time.monotonic() - started:.1f} s: {runtime.python}"
    )


def _prepare_view(venv: Path) -> None:
    """Make the sandbox's hard-link view of the venv now (seconds, once), not in the first
    run (sandbox/views.py: what keeps the runtime's host path out of mountinfo inside)."""
    from synthorg.sandbox.views import link_farm

    try:
        link_farm(venv)
    except OSError as exc:
        console.print(f"[yellow]no neutral view of the runtime[/] ({escape(str(exc))}); "
                      "runs will bind its host path")  # fmt: skip


@app.command()
def status(config: Path | None = ConfigOption) -> None:
    """Show whether each runtime is built for the current lockfile, and where."""
    settings = settings_from(config)
    try:
        state = runtime_status(settings.home)
    except SynthOrgError as exc:
        fail(str(exc), code=1)
    table = Table("runtime", "state", "lock", "python", "entrypoint")
    table.add_row(
        RuntimeName.openhands.value,
        "[green]built[/]" if state.built else "[yellow]not built[/]",
        state.lock_hash,
        str(state.python or state.venv_path),
        str(state.entrypoint),
    )
    console.print(table)
    if not state.built:
        console.print("build it with: [bold]synthorg runtime build openhands[/]")
