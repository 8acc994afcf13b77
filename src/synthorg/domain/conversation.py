"""The conversation's base state: what is known about it apart from its event log."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain.ids import ConversationId, ExecutionId
from synthorg.domain.risk import ConfirmationPolicy
from synthorg.domain.status import ConversationStatus, TerminationReason
from synthorg.domain.task import AgentIdentity, Task
from synthorg.domain.usage import TokenUsage


class WorkspaceInfo(BaseModel):
    """Where a conversation works."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="Host path of the worktree (or the directory run in place).")
    branch: str | None = Field(default=None, description="The conversation's branch, if git.")
    base_ref: str | None = Field(default=None, description="Commit the branch started from.")
    is_worktree: bool = Field(default=False, description="Whether a dedicated worktree is used.")


class ConversationRecord(BaseModel):
    """Base state of a conversation, persisted beside its event log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: ConversationId = Field(description="Stable id; a resumed run re-attaches by it.")
    task: Task = Field(description="The task being worked on.")
    agent: AgentIdentity = Field(description="Who works on it.")
    loop_type: str = Field(description="The execution loop chosen for it.")
    model: str = Field(description="The model id the run is bound to.")
    provider: str = Field(default="", description="The gateway provider serving the model.")
    status: ConversationStatus = Field(default=ConversationStatus.CREATED, description="Status.")
    created_at: datetime = Field(description="Creation time (UTC).")
    updated_at: datetime = Field(description="Last base-state change (UTC).")
    workspace: WorkspaceInfo | None = Field(default=None, description="Its workspace, once made.")
    max_turns: int = Field(default=30, ge=1, description="Turn cap per run.")
    budget_usd: Decimal | None = Field(
        default=None,
        ge=0,
        description="Cost ceiling over all its runs (a root's: of its delegation tree).",
    )
    confirmation_policy: ConfirmationPolicy = Field(
        default=ConfirmationPolicy.NEVER, description="When actions wait for a person."
    )
    execution_id: ExecutionId | None = Field(default=None, description="The latest run's id.")
    runs: int = Field(default=0, ge=0, description="How many runs have been started.")
    termination_reason: TerminationReason | None = Field(
        default=None, description="Why the latest run ended."
    )
    usage: TokenUsage = Field(default_factory=TokenUsage, description="Totals over all runs.")
    turns: int = Field(default=0, ge=0, description="Action turns over all runs.")
    commit_sha: str | None = Field(default=None, description="Latest commit landed by the gate.")
    error: str | None = Field(default=None, description="Latest error message, if any.")
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="Secret values (encrypted at rest with a key, else redacted and lost).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels.")
    parent_id: ConversationId | None = Field(
        default=None, description="The conversation that delegated this one (None: a root)."
    )
    root_id: ConversationId | None = Field(
        default=None, description="The root of its delegation tree (None: it is a root)."
    )
