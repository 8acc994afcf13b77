"""Configuration (OpenHandsLoopConfig) and per-run dependencies (OpenHandsLoopDeps) of the loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from synthorg.engine.openhands.conversation import ConversationFactory
from synthorg.engine.openhands.errors import OpenHandsLoopError


class OpenHandsLoopConfig(BaseModel):
    """Bounds of an OpenHands run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int | None = Field(
        default=None, ge=1, description="Turn cap; None uses the run's own max_turns."
    )
    idle_timeout_s: float | None = Field(
        default=900.0,
        gt=0,
        description="Stop when the runtime is silent this long (not counted while a "
        "decision is awaited); None = no idle limit.",
    )
    pool_size: int = Field(
        default=1,
        ge=0,
        description="Sandboxes `serve`, `worker` and `run --loop openhands` keep started, the SDK "
        "imported, each for one run (bwrap as root with a worktree quota); 0 = none.",
    )


def _not_blank(name: str, value: str | None, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if value is None or not value.strip():
        raise OpenHandsLoopError(
            f"OpenHandsLoopDeps.{name} is blank; give the URL the sandboxed runtime uses "
            "(e.g. http://127.0.0.1:18080/v1)"
        )


@dataclass(frozen=True)
class OpenHandsLoopDeps:
    """What the OpenHands loop needs per run (required via ``LoopDependencies``).

    URLs and paths are as seen INSIDE the sandbox; blank URLs are refused at construction.
    """

    conversation_factory: ConversationFactory
    """Builds the conversation (the sandboxed runtime) for a run spec."""
    gateway_base_url: str
    """OpenAI-compatible gateway base URL inside the sandbox."""
    mcp_base_url: str | None = None
    """Credentialed MCP endpoint inside the sandbox; None when the project has no tools."""
    workspace_path: str = "/workspace"
    """The worktree as the runtime sees it."""
    persistence_dir: str = "/state"
    """Where the runtime persists the SDK conversation (outside the worktree)."""
    input_cost_per_token: float | None = None
    """The gateway's prompt price for the model, so the runtime's running cost is right."""
    output_cost_per_token: float | None = None
    """The gateway's completion price for the model."""
    config: OpenHandsLoopConfig = field(default_factory=OpenHandsLoopConfig)
    """Bounds of the run."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds, for run durations."""

    def __post_init__(self) -> None:
        _not_blank("gateway_base_url", self.gateway_base_url)
        _not_blank("mcp_base_url", self.mcp_base_url, optional=True)
        if not self.workspace_path.strip() or not self.persistence_dir.strip():
            raise OpenHandsLoopError("OpenHandsLoopDeps needs the workspace and persistence paths")
