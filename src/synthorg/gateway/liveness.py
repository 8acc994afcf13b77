"""Whether a run's bearer is still alive: the one rule both the gateway and the MCP server apply.

A bearer's signature and expiry say who it was minted for; whether it may still act is decided
by the run's ledger row in the shared store. A finished or killed execution, or one whose spend
reached its ceiling, refuses every further request at every boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from synthorg.domain.money import reached
from synthorg.store.protocol import ExecutionStatus, ExecutionUsage

ClosedCode = Literal["execution_finished", "execution_killed", "cost_ceiling_reached"]


@dataclass(frozen=True, slots=True)
class RunClosed:
    """Why a run's bearer may no longer act, with the HTTP status the gateway answers."""

    code: ClosedCode
    message: str
    status: int
    """402 for the cost ceiling (the OpenAI 'insufficient_quota' shape), 403 otherwise."""


def run_closed(row: ExecutionUsage, *, spent: Decimal | None = None) -> RunClosed | None:
    """None while the execution may act; otherwise why not.

    ``spent`` is the caller's freshest figure of the execution's cost (the gateway meters in
    memory ahead of the ledger); the row's own total is used when it is not given.
    """
    if row.status == ExecutionStatus.FINISHED:
        return RunClosed(
            "execution_finished",
            f"execution {row.execution_id!r} is finished; its bearer is no longer valid",
            403,
        )
    cost = row.cost_usd if spent is None else spent
    ceiling = row.cost_ceiling_usd
    if reached(ceiling, cost):
        return RunClosed(
            "cost_ceiling_reached",
            f"execution {row.execution_id!r} reached its cost ceiling of ${ceiling} "
            f"(spent ${cost:.6f}); the run was killed",
            402,
        )
    if row.status == ExecutionStatus.KILLED:
        return RunClosed(
            "execution_killed",
            f"execution {row.execution_id!r} was killed ({row.status_reason or 'no reason'})",
            403,
        )
    return None
