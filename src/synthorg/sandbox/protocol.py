"""The sandbox boundary: request/exit/limit models and the streamer protocols the engine uses."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: The in-sandbox forwarder listens on these ports; below 1024 needs privileges we drop.
_MIN_PORT = 1024
_MAX_PORT = 65535


class ForwardedEndpoint(BaseModel):
    """One host service (gateway, MCP server) reachable from inside the sandbox."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(
        pattern=r"^[a-z][a-z0-9_-]{0,31}$",
        description="Short name (e.g. 'gateway'); names the socket file inside the sandbox.",
    )
    host_socket: Path = Field(description="Unix socket on the host where the service listens.")
    sandbox_port: int = Field(
        ge=_MIN_PORT,
        le=_MAX_PORT,
        description="Inside, a forwarder listens on 127.0.0.1:<port> and relays to host_socket.",
    )

    @property
    def base_url(self) -> str:
        """The HTTP base URL a program inside the sandbox uses to reach this endpoint."""
        return f"http://127.0.0.1:{self.sandbox_port}"


FILE_BYTES_BOUND = 2**32
"""``file_bytes`` stays below it: a file grown by 2**32 bytes matches its index entry's size
(git records sizes modulo 2**32), so the host-work bounds, which list by stat data
(``workspace/hostlimits.pending``), would let ``git add`` hash it unmeasured."""


class SandboxLimits(BaseModel):
    """Resource caps for one sandboxed run."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a typo in [sandbox.limits] is an error

    max_processes: int = Field(
        default=512, ge=4, description="Most processes/threads alive at once (pids cap)."
    )
    memory_bytes: int = Field(
        default=4 * 1024**3, ge=16 * 1024**2, description="Memory cap for the whole sandbox."
    )
    cpu_quota: float = Field(
        default=2.0, gt=0, description="CPU cores the sandbox may use at once (cgroup quota)."
    )
    tmp_bytes: int = Field(
        default=512 * 1024**2,
        ge=1024**2,
        description="Size of the sandbox's private /tmp (a tmpfs; past it writes get ENOSPC).",
    )
    disk_bytes: int | None = Field(
        default=2 * 1024**3,
        ge=1024**2,
        description="Growth allowed in the worktree over the run (its own filesystem: ENOSPC "
        "past it); None = no quota.",
    )
    file_bytes: int = Field(
        default=1024**3,
        ge=1024**2,
        lt=FILE_BYTES_BOUND,
        description="Largest file a sandboxed process may write (RLIMIT_FSIZE: EFBIG past it); "
        "under 4 GiB, because git's index keeps sizes modulo 2**32 and the host-work bounds "
        "judge unlisted files by their index entry's size.",
    )
    cpu_seconds: int | None = Field(
        default=None, ge=1, description="Per-process CPU-time cap (RLIMIT_CPU); None = no cap."
    )
    wall_timeout_s: float = Field(
        default=3600.0, gt=0, description="Wall-clock limit for the run; then it is killed."
    )
    idle_timeout_s: float | None = Field(
        default=900.0, gt=0, description="Kill when no stdout line arrived for this long."
    )


class SandboxRequest(BaseModel):
    """Everything a backend needs to start one sandboxed process."""

    model_config = ConfigDict(frozen=True)

    argv: list[str] = Field(min_length=1, description="Program and arguments run inside.")
    workspace: Path = Field(description="Host worktree, bound read-write at /workspace (cwd).")
    state_dir: Path | None = Field(
        default=None, description="Host dir bound read-write at /state (e.g. persistence)."
    )
    read_only_binds: list[Path] = Field(
        default_factory=list, description="Host paths bound read-only at the same path inside."
    )
    runtime_binds: list[Path] = Field(
        default_factory=list,
        description="Host dirs shown read-only at a neutral path inside (runtime_path_inside); "
        "neither that path nor the mount's source names the host location.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="The only environment inside besides PATH/HOME/LANG."
    )
    endpoints: list[ForwardedEndpoint] = Field(
        default_factory=list, description="Host services forwarded to 127.0.0.1 ports inside."
    )
    limits: SandboxLimits = Field(
        default_factory=SandboxLimits, description="Resource caps and timeouts."
    )
    conversation_id: str = Field(
        min_length=1, description="Names the run in cgroup paths and logs."
    )

    @field_validator("workspace", "state_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError(f"{value} must be an absolute host path")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or "\0" in item:
                raise ValueError(f"environment variable {key!r} has an invalid name or value")
        return value

    @field_validator("read_only_binds", "runtime_binds")
    @classmethod
    def _absolute_binds(cls, value: list[Path]) -> list[Path]:
        for path in value:
            if not path.is_absolute():
                raise ValueError(f"read-only bind {path} must be an absolute host path")
        return value

    @model_validator(mode="after")
    def _distinct_endpoints(self) -> SandboxRequest:
        names = [e.name for e in self.endpoints]
        ports = [e.sandbox_port for e in self.endpoints]
        if len(set(names)) != len(names) or len(set(ports)) != len(ports):
            raise ValueError("forwarded endpoints need distinct names and sandbox ports")
        return self


class ExitReason(StrEnum):
    """Why a sandboxed process ended."""

    COMPLETED = "completed"
    STOPPED = "stopped"
    TIMEOUT = "timeout"
    IDLE_TIMEOUT = "idle_timeout"
    MEMORY_LIMIT = "memory_limit"
    PROCESS_LIMIT = "process_limit"
    KILLED = "killed"
    ERROR = "error"


class SandboxExit(BaseModel):
    """How a sandboxed process ended."""

    model_config = ConfigDict(frozen=True)

    returncode: int | None = Field(description="Exit status (128+signal when killed); None=none.")
    reason: ExitReason = Field(description="Why it ended.")
    message: str = Field(description="One human sentence saying what happened.")
    stderr_tail: str = Field(default="", description="Last bytes of stderr, for diagnostics.")
    peak_processes: int | None = Field(
        default=None, description="Most processes seen at once, when the backend can tell."
    )
    duration_s: float = Field(default=0.0, description="Wall time from start to exit.")


@runtime_checkable
class SandboxProcess(Protocol):
    """A running sandboxed process: stdout lines out, control lines in."""

    @property
    def exit(self) -> SandboxExit | None:
        """How it ended; None while it runs."""
        ...

    @property
    def stderr_tail(self) -> str:
        """The bounded tail of stderr seen so far."""
        ...

    async def send_line(self, line: str) -> None:
        """Write one control line (newline appended) to its stdin."""
        ...

    def __aiter__(self) -> AsyncIterator[str]:
        """Yield stdout lines (without newline) until stdout closes."""
        ...

    async def stop(self, grace_s: float = 0.0) -> SandboxExit:
        """Close stdin, allow grace_s for a natural end, then tear the sandbox down."""
        ...


class BoundaryStatus(StrEnum):
    """How a declared boundary row holds on this host."""

    ENFORCED = "enforced"
    WEAKER = "weaker"
    NOT_ENFORCED = "not_enforced"


class BoundaryRow(BaseModel):
    """One row of a backend's boundary declaration."""

    model_config = ConfigDict(frozen=True)

    boundary: str = Field(description="filesystem / network / processes / resources / secrets.")
    declared: str = Field(description="What the backend promises.")
    on_this_host: str = Field(description="What actually holds on this host.")
    status: BoundaryStatus = Field(description="Whether the promise holds here.")
    warning: str | None = Field(default=None, description="Set when weaker than declared.")


class BoundaryDeclaration(BaseModel):
    """What a sandbox backend enforces, row by row, as it holds on this host."""

    model_config = ConfigDict(frozen=True)

    backend: str = Field(description="Backend name (bwrap, local, ...).")
    rows: list[BoundaryRow] = Field(description="One row per boundary.")

    @property
    def warnings(self) -> list[str]:
        """Every row's warning, prefixed with the row's name."""
        return [f"{r.boundary}: {r.warning}" for r in self.rows if r.warning]

    @property
    def fully_enforced(self) -> bool:
        """True when every row holds as declared."""
        return all(r.status is BoundaryStatus.ENFORCED for r in self.rows)


@runtime_checkable
class SandboxStreamer(Protocol):
    """A sandbox backend: starts one isolated process per run and tears it down."""

    name: str

    def boundary(self) -> BoundaryDeclaration:
        """What this backend enforces, as it holds on this host."""
        ...

    def workspace_path_inside(self, request: SandboxRequest) -> str:
        """Where the request's workspace appears to the sandboxed program."""
        ...

    def state_path_inside(self, request: SandboxRequest) -> str | None:
        """Where the request's state dir appears inside (None without one)."""
        ...

    def runtime_path_inside(self, runtime_binds: Sequence[Path], host: Path) -> str:
        """Where host (one of a request's runtime_binds, or a path under one) appears inside."""
        ...

    def python_inside(self) -> str:
        """An interpreter path (stdlib available) that works inside the sandbox."""
        ...

    def toolbox_argv(self) -> list[str]:
        """argv that runs the stdlib toolbox (synthorg.sandbox.toolbox) inside."""
        ...

    def stream(
        self, request: SandboxRequest, first_line: str
    ) -> AbstractAsyncContextManager[SandboxProcess]:
        """Start the process, send first_line, and tear everything down on any exit."""
        ...
