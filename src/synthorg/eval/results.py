"""What one evaluated run produced, and the plan of an evaluation (tasks x arms x repeats)."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain import Complexity
from synthorg.engine.config import LoopType


class Arm(BaseModel):
    """One side of the A/B: a loop, and (for experiments and tests) a pinned model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loop: LoopType = Field(description="Loop type run for every task of this arm.")
    model: str | None = Field(None, description="Model for this arm; None = the eval's model.")

    @property
    def name(self) -> str:
        return self.loop if self.model is None else f"{self.loop}@{self.model}"

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``react`` or ``react@model``."""
        loop, _, model = text.partition("@")
        return cls(loop=loop.strip(), model=model.strip() or None)


class EvalPlan(BaseModel):
    """Everything an evaluation needs to run (and resume) identically."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    eval_id: str
    suite_path: str = Field(description="The suite file, absolute.")
    suite_hash: str | None = Field(None, description="Hash of the suite's content when planned.")
    suite_fingerprint: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Task id -> field -> hash: what a resume compares."
    )
    repo_map: dict[str, str] = Field(default_factory=dict, description="SWE-bench repo → path/URL.")
    arms: tuple[Arm, ...] = Field(min_length=2)
    repeats: int = Field(1, ge=1, le=100)
    model: str | None = Field(None, description="Model for every arm without its own.")
    budget_usd: Decimal | None = Field(None, ge=0, description="Same ceiling for every run.")
    max_turns: int | None = Field(None, ge=1)
    concurrency: int = Field(2, ge=1, le=64)


class TaskResult(BaseModel):
    """One run of one task by one arm, judged by the hidden check."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    arm: str
    repeat: int
    complexity: Complexity
    conversation_id: str
    resolved: bool
    termination_reason: str
    cost_usd: Decimal = Decimal(0)
    tokens_in: int = 0
    tokens_out: int = 0
    turns: int = 0
    wall_s: float = Field(0.0, description="The whole item: run, check and bookkeeping.")
    check_s: float = Field(0.0, description="Of which the hidden check and bookkeeping.")
    commit_sha: str | None = None
    model_patch: str = Field("", description="Diff base..result: the SWE-bench prediction.")
    check_output: str = Field("", description="Tail of the hidden check's output.")

    @property
    def key(self) -> str:
        return result_key(self.task_id, self.arm, self.repeat)


def result_key(task_id: str, arm: str, repeat: int) -> str:
    """The store key of one (task, arm, repeat) result: at most one result each."""
    return f"result/{arm}/{repeat}/{task_id}"
