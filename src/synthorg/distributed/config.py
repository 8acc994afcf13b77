"""The ``[distributed]`` section: which engine runs runs, and how to reach Temporal."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.settings import Settings, section


class DistributedConfig(BaseModel):
    """Where runs execute; ``embedded`` (the default) needs no Temporal at all."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Literal["embedded", "temporal"] = Field(
        default="embedded", description="embedded: in this process; temporal: on workers."
    )
    address: str = Field(
        default="127.0.0.1:7233",
        min_length=3,
        max_length=255,
        pattern=r"^[A-Za-z0-9._\[\]:-]+:[0-9]{1,5}$",
        description="Temporal frontend host:port.",
    )
    namespace: str = Field(
        default="default", pattern=r"^[A-Za-z0-9._-]{1,64}$", description="Temporal namespace."
    )
    task_queue: str = Field(
        default="synthorg-runs",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="The queue workers poll for runs.",
    )
    concurrency: int = Field(default=4, ge=1, le=256, description="Runs one worker holds at once.")
    heartbeat_timeout_s: float = Field(
        default=10.0,
        ge=2.0,
        le=600.0,
        description="A run-loop activity silent this long is retried on another worker.",
    )
    owner_lease_s: float | None = Field(
        default=None,
        ge=1.0,
        le=3600.0,
        description="How long a worker's hold on a run outlives its last renewal (renewed "
        "every third of it); past it the run is swept as its owner's death and taken over. "
        "Default: twice heartbeat_timeout_s, so a frozen or cut-off worker's run is taken "
        "over soon after Temporal moved its activity.",
    )
    health_file: Path | None = Field(
        default=None,
        description="Where a worker renews its health signal (default SYNTHORG_HOME/run/"
        "worker-health.json); `synthorg worker --health` reads it.",
    )

    def health_path(self, home: Path) -> Path:
        """The worker's health file, for the data dir ``home``."""
        return self.health_file or home / "run" / "worker-health.json"


def distributed_config(settings: Settings) -> DistributedConfig:
    """The validated ``[distributed]`` section."""
    return section(settings, "distributed", DistributedConfig)
