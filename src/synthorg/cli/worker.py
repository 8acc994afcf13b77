"""``synthorg worker``: run SynthOrg runs handed out by Temporal (the distributed engine)."""

from __future__ import annotations

from pathlib import Path

import typer

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from


def worker(
    address: str | None = typer.Option(None, help="Temporal host:port ([distributed] address)."),
    namespace: str | None = typer.Option(None, help="Temporal namespace."),
    task_queue: str | None = typer.Option(None, help="The task queue runs are polled from."),
    concurrency: int | None = typer.Option(None, min=1, max=256, help="Runs held at once."),
    config: Path | None = ConfigOption,
) -> None:
    """Run activities of the Temporal engine: workspaces, loops, landing, control."""
    from pydantic import ValidationError

    from synthorg.distributed.config import distributed_config
    from synthorg.errors import SynthOrgError
    from synthorg.extras import require

    require("temporalio")  # the [temporal] extra

    settings = settings_from(config)
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
