"""Settings of the native loops: model call parameters, tool limits, plan and stuck bounds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class NativeLoopSettings(BaseModel):
    """Tunables shared by react, plan_execute and hybrid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = Field(default=None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(default=None, gt=0, description="Output token cap per call.")
    request_timeout_s: float = Field(default=600.0, gt=0, description="Model call timeout.")
    command_timeout_s: float = Field(default=120.0, gt=0, description="Default command timeout.")
    max_command_timeout_s: float = Field(
        default=1800.0, gt=0, description="Longest timeout a model may ask for."
    )
    max_output_bytes: int = Field(
        default=30_000, ge=1_000, description="Terminal output cap (head and tail kept)."
    )
    stuck_after: int = Field(
        default=3, ge=2, description="The same action this many turns in a row means stuck."
    )
    step_max_turns: int = Field(
        default=12, ge=1, description="plan_execute: turn bound of one step's react sub-loop."
    )
    max_replans: int = Field(
        default=3, ge=0, description="plan_execute: re-plans allowed before the run errors."
    )
    review_every: int = Field(
        default=6, ge=1, description="hybrid: turns between plan reviews (checkpoints)."
    )
    max_revisions_when_stuck: int = Field(
        default=2, ge=0, description="hybrid: stuck-triggered revisions before the run errors."
    )
    planning_attempts: int = Field(
        default=5, ge=1, description="Turns a model gets (to look around and) write a plan."
    )
