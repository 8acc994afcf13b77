"""What a run's bearer binds: the one type the engine grants and the gateway mints and verifies."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain.conversation import ConversationRecord
from synthorg.domain.money import remaining


class RunBinding(BaseModel):
    """What a per-run bearer binds: who runs what, on which provider and model, up to which
    cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: str = Field(min_length=1, description="The run's execution id.")
    agent_id: str = Field(min_length=1, description="The agent running.")
    task_id: str = Field(min_length=1, description="The task worked on.")
    project_id: str = Field(min_length=1, description="The project; scopes MCP tools.")
    conversation_id: str = Field(min_length=1, description="The conversation; scopes the branch.")
    provider: str = Field(min_length=1, description="The provider explicitly bound.")
    model_id: str = Field(min_length=1, description="The model explicitly bound.")
    cost_ceiling: Decimal | None = Field(default=None, ge=0, description="Hard cost ceiling USD.")

    @classmethod
    def of(
        cls, record: ConversationRecord, execution_id: str, *, spent: Decimal = Decimal(0)
    ) -> RunBinding:
        """The binding of a run of ``record``: its ceiling is the conversation's budget less
        what its earlier runs ``spent`` (a resumed run continues the budget, never afresh)."""
        return cls(
            execution_id=execution_id,
            agent_id=record.agent.id,
            task_id=record.task.id,
            project_id=record.task.project_id,
            conversation_id=record.id,
            provider=record.provider,
            model_id=record.model,
            cost_ceiling=remaining(record.budget_usd, spent),
        )
