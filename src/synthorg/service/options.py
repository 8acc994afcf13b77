"""What a caller may choose when creating a conversation."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain import ConfirmationPolicy
from synthorg.engine.config import LoopType


class RunOptions(BaseModel):
    """Per-conversation choices; None means the configured default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loop: LoopType | None = Field(
        default=None, description="Force a loop; None = selection/default."
    )
    model: str | None = Field(default=None, description="Model id; None = the configured default.")
    provider: str | None = Field(
        default=None, description="Provider serving the model; None = the one configured for it."
    )
    max_turns: int | None = Field(default=None, ge=1, le=10_000, description="Turn cap per run.")
    budget_usd: Decimal | None = Field(default=None, ge=0, description="Hard cost ceiling per run.")
    confirmation_policy: ConfirmationPolicy = Field(
        default=ConfirmationPolicy.NEVER, description="When actions wait for a person."
    )
    worktree: bool = Field(default=True, description="Give the run its own git worktree.")
    base_ref: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=r"^[^\x00]+$",
        description="Branch/commit to start from.",
    )
