"""What a caller may choose when creating a conversation."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from synthorg.domain import ConfirmationPolicy
from synthorg.engine.config import LoopType

_DECIMAL_TEXT = r"^[0-9]{1,15}(\.[0-9]{1,15})?$"


def _plain_decimal(value: object) -> object:
    """Text must be a plain decimal (as the schema says): no exponent, sign or spaces."""
    if isinstance(value, str) and re.fullmatch(_DECIMAL_TEXT, value) is None:
        raise ValueError("an amount given as text must be a plain decimal such as 2.50")
    return value


_USD_LIMIT = 10**15
"""Above every amount the text form can spell; a number is held to the same (beyond it a
ceiling is no ceiling, and carving shares of it overflows decimal precision)."""

Usd = Annotated[
    Decimal,
    BeforeValidator(_plain_decimal),
    Field(ge=0, lt=_USD_LIMIT),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "exclusiveMaximum": _USD_LIMIT},
                {"type": "string", "pattern": _DECIMAL_TEXT},
            ]
        }
    ),
]
"""A non-negative amount in USD, as a JSON number or plain decimal text (exact either way)."""


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
    budget_usd: Usd | None = Field(
        default=None,
        description="Hard cost ceiling of the conversation over all its runs (a root's covers "
        "its whole delegation tree).",
    )
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
