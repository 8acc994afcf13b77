"""``synthorg worker``: run SynthOrg runs handed out by Temporal (the distributed engine)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from

if TYPE_CHECKING:
    from synthorg.settings import Settings


def worker(
    address: str | None = typer.Option(None, help="Temporal host:port ([distributed] address)."),
    namespace: str | None = typer.Option(None, help="Temporal namespace."),
    task_queue: str | None = typer.Option(None, help="The task queue runs are polled from."),
    concurrency: int | None = typer.Option(None, min=1, max=256, help="Runs held at once."),
    health: bool = typer.Option(
        False,
        "--health",
        help="Start nothing: exit 0 if this host's worker renewed its health file lately, "
        "else 1 (a container health check).",
    ),
    config: Path | None = ConfigOption,
) -> None:
    """Run activities of the Temporal engine: workspaces, loops, landing, control."""
    from pydantic import ValidationError

    from synthorg.distributed.config import distributed_config
    from synthorg.errors import SynthOrgError
    from synthorg.extras import require

    settings = settings_from(config)
    if health:
        _health(settings)
        return
    require("temporalio")  # the [temporal] extra

    try:
        wanted = distributed_config(settings)
        overrides = {
            k: v
            for k, v in {
                "address": address,
                "namespace": namespace,
                "task_queue": task_queue,
                "concurrency": concurrency,
            }.items()
            if v is not None
        }
        wanted = wanted.model_validate({**wanted.model_dump(), **overrides})
    except (SynthOrgError, ValidationError) as exc:
        fail(str(exc))
    from synthorg.distributed.worker import serve_worker

    def announce(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    run_async(serve_worker(settings, wanted, announce=announce))


def _health(settings: Settings) -> None:
    """Exit 0 when the worker's health file is fresh, else 1 saying why (no Temporal import)."""
    from synthorg.distributed.config import distributed_config
    from synthorg.distributed.pulse import pulse_problem

    problem = pulse_problem(distributed_config(settings).health_path(settings.home))
    if problem is not None:
        console.print(f"unhealthy: {problem}", markup=False, highlight=False)
        raise typer.Exit(1)
    console.print("healthy", markup=False, highlight=False)
