"""Configuration of the run service: defaults for runs, the sandbox, and the commit gate."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.sandbox.protocol import SandboxLimits
from synthorg.workspace.gate import DEFAULT_SECRET_PATTERNS
from synthorg.workspace.hostlimits import DEFAULT_MAX_CHANGED_FILES, DEFAULT_MAX_FILE_BYTES


class RunDefaults(BaseModel):
    """The ``[run]`` section: what a run uses when the caller does not say."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(default="scripted-demo", description="Default model id.")
    provider: str | None = Field(
        default=None, description="Provider of the default model; None = the one serving it."
    )
    budget_usd: Decimal | None = Field(default=None, ge=0, description="Default cost ceiling.")
    shutdown_grace_s: float = Field(
        default=10.0, ge=0, description="How long shutdown waits for runs to stop by themselves."
    )


class SandboxSettings(BaseModel):
    """The ``[sandbox]`` section."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["bwrap", "local"] = Field(default="bwrap", description="Sandbox backend.")
    allow_local: bool = Field(
        default=False, description="Explicit opt-in to the unisolated local backend."
    )
    limits: SandboxLimits = Field(default_factory=SandboxLimits, description="Per-run caps.")


class GateSettings(BaseModel):
    """The ``[gate]`` section: the commit gate's author and refused files."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    author_name: str = Field(default="SynthOrg", description="Commit author name.")
    author_email: str = Field(default="synthorg@localhost", description="Commit author email.")
    secret_patterns: tuple[str, ...] = Field(
        default=DEFAULT_SECRET_PATTERNS, description="Files never committed."
    )
    max_file_bytes: int = Field(
        default=DEFAULT_MAX_FILE_BYTES, ge=1, description="Largest file the gate commits."
    )
    max_changed_files: int = Field(
        default=DEFAULT_MAX_CHANGED_FILES,
        ge=1,
        description="Most files a run may add or change (refused before host git hashes them).",
    )


class HostWorkSettings(BaseModel):
    """The ``[limits]`` section: what one run's host-side work (host git on its worktree, the
    quota image's mkfs and rsync) may use, so that a hostile tree cannot hold the host."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host_work_cpu_s: float = Field(
        default=1800.0,
        gt=0,
        description="CPU seconds all host-side children of one run may use together.",
    )
    host_work_wall_s: float = Field(
        default=600.0, gt=0, description="Wall seconds one host-side step may take."
    )
    host_work_cpu_quota: float = Field(
        default=1.0, gt=0, description="CPU cores a run's host-side work may use at once."
    )
