"""Whether a run's bearer is still alive: the one rule both the gateway and the MCP server apply.

A bearer's signature and expiry say who it was minted for; whether it may still act is decided
by the run's ledger row in the store that issued it (``issued_elsewhere``). A finished or killed
execution, one whose spend reached its ceiling, or one whose owner stopped renewing its lease
(the process died, froze or lost the store) refuses every further request at every boundary:
the lapse needs no one to reconcile the run first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

from synthorg.domain.money import reached
from synthorg.store.protocol import ExecutionStatus, ExecutionUsage

ClosedCode = Literal[
    "execution_finished", "execution_killed", "cost_ceiling_reached", "execution_lapsed"
]


@dataclass(frozen=True, slots=True)
class RunClosed:
    """Why a run's bearer may no longer act, with the HTTP status the gateway answers."""

    code: ClosedCode
    message: str
    status: int
    """402 for the cost ceiling (the OpenAI 'insufficient_quota' shape), 403 otherwise."""


def issued_elsewhere(bearer_ledger: str, own_ledger: str) -> str | None:
    """Why a bearer minted by another ledger (another store, or this one wiped or restored
    while the key survived) may not act here; None when this ledger issued it."""
    if bearer_ledger == own_ledger:
        return None
    return (
        f"this bearer was issued by ledger {bearer_ledger!r}, not by this store's "
        f"({own_ledger!r}): a bearer acts only at the ledger that opened its run"
    )


def lapsed(row: ExecutionUsage, at: datetime | None = None) -> bool:
    """The execution is leased and its owner's lease ran out before ``at`` (default: now)."""
    lease = row.lease_expires_at
    return lease is not None and lease <= (at or datetime.now(UTC))


def run_closed(
    row: ExecutionUsage, *, spent: Decimal | None = None, at: datetime | None = None
) -> RunClosed | None:
    """None while the execution may act; otherwise why not.

    ``spent`` is the caller's freshest figure of the execution's cost (the gateway meters in
    memory ahead of the ledger); the row's own total is used when it is not given. ``at`` is
    the moment the lease is judged at (default: now).
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
    if lapsed(row, at):
        assert row.lease_expires_at is not None
        return RunClosed(
            "execution_lapsed",
            f"execution {row.execution_id!r} is no longer run by anyone: its owner's lease ran "
            f"out at {row.lease_expires_at.isoformat(timespec='seconds')} (the process died, "
            "froze or lost the store); resume the conversation to get a new bearer",
            403,
        )
    return None
