"""Token and cost figures."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field


class TokenUsage(BaseModel):
    """Tokens and cost of one model call, one turn, or a whole run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens_in: int = Field(default=0, ge=0, description="Prompt tokens.")
    tokens_out: int = Field(default=0, ge=0, description="Completion tokens.")
    cost_usd: Decimal = Field(default=Decimal(0), ge=0, description="Cost in US dollars.")

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out,
            cost_usd=self.cost_usd + other.cost_usd,
        )

    def minus(self, earlier: TokenUsage) -> TokenUsage:
        """The delta since ``earlier`` (a running total taken before this one)."""
        return TokenUsage(
            tokens_in=max(0, self.tokens_in - earlier.tokens_in),
            tokens_out=max(0, self.tokens_out - earlier.tokens_out),
            cost_usd=max(Decimal(0), self.cost_usd - earlier.cost_usd),
        )
