"""What a run produces: turn records and the execution result."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain.ids import ConversationId, ExecutionId
from synthorg.domain.status import TerminationReason
from synthorg.domain.usage import TokenUsage


class TurnRecord(BaseModel):
    """One action turn of a run: the tools called and what its model call cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn_index: int = Field(ge=0, description="0-based index of the turn within the run.")
    tool_names: tuple[str, ...] = Field(default=(), description="Tools called in this turn.")
    tokens_in: int = Field(default=0, ge=0, description="Prompt tokens of this turn.")
    tokens_out: int = Field(default=0, ge=0, description="Completion tokens of this turn.")
    cost_usd: Decimal = Field(default=Decimal(0), ge=0, description="Cost delta of this turn.")

    @property
    def usage(self) -> TokenUsage:
        """The turn's figures as a TokenUsage."""
        return TokenUsage(
            tokens_in=self.tokens_in, tokens_out=self.tokens_out, cost_usd=self.cost_usd
        )


class ExecutionResult(BaseModel):
    """The outcome of one run of an execution loop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: ExecutionId = Field(description="The run's execution id (bound in its bearer).")
    conversation_id: ConversationId = Field(description="The conversation the run belongs to.")
    loop_type: str = Field(description="The loop that ran: react, plan_execute, hybrid, openhands.")
    termination_reason: TerminationReason = Field(description="Why the run ended.")
    turns: tuple[TurnRecord, ...] = Field(default=(), description="One record per action turn.")
    usage: TokenUsage = Field(default_factory=TokenUsage, description="Run totals.")
    final_message: str = Field(default="", description="The agent's closing summary.")
    error: str | None = Field(default=None, description="What failed, for ERROR terminations.")
    resumed: bool = Field(default=False, description="Whether this run continued a conversation.")
    commit_sha: str | None = Field(default=None, description="Commit landed by the commit gate.")
    branch: str | None = Field(default=None, description="The conversation's branch.")
    tool_calls: int = Field(default=0, ge=0, description="Number of tool calls made.")
    delegated_cost_usd: Decimal = Field(
        default=Decimal(0),
        ge=0,
        description="What the children this run delegated to spent (the gateway's ledger); "
        "``usage`` is the run's own spend.",
    )

    @property
    def succeeded(self) -> bool:
        """Completed without error (NO_OP is not success)."""
        return self.termination_reason is TerminationReason.COMPLETED
