"""Metering: every admitted request billed exactly once, and the run killed at its ceiling.

A request is settled in memory before its answer goes out: from the upstream's usage when it
reports it, otherwise from the conservative bill in ``estimate``. The ledger write happens
after the response is sent; the in-memory totals (which include settled but not yet persisted
requests) drive admission, so a write's latency never admits too much.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Protocol

from synthorg.gateway.estimate import Ending
from synthorg.gateway.state import RunStates
from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import Usage
from synthorg.store.protocol import BudgetHold, ExecutionStatus, ExecutionUsage, LedgerStore


class HoldSettler(Protocol):
    """Replaces a request's hold in a shared ledger by its bill (``SharedBudget``)."""

    async def settle(
        self, hold: BudgetHold, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        """Drop the hold and record the bill in one write."""
        ...


class Meter:
    """Settles tickets in memory, tells the listeners, and writes the bills to the ledger."""

    def __init__(self, ledger: LedgerStore, runs: RunStates, holds: HoldSettler | None) -> None:
        self.ledger = ledger
        self.runs = runs
        self.holds = holds
        self._listeners: list[Callable[[Ticket], None]] = []

    def on_settle(self, listener: Callable[[Ticket], None]) -> None:
        """Call ``listener`` with every ticket once it is settled (metrics, audits, tests)."""
        self._listeners.append(listener)

    async def settle(
        self, ticket: Ticket, usage: Usage | None, ending: Ending = "incomplete"
    ) -> None:
        """Account the request once, in memory; persist() writes it.

        ``usage`` is what the upstream reported for the whole answer; it is billed as is.
        Without it: an ``answered`` request (complete, or cut at the ceiling) is billed its
        upper-bound prompt and its output bytes, a ``refused`` one (the upstream answered an
        error, or was never reached) nothing, an ``incomplete`` one (stalled, caller gone,
        broken mid-way, cancelled) its whole reservation.
        """
        if ticket.settled:
            return
        ticket.settled = True
        state = ticket.state
        ticket.billed_as = "reported" if usage is not None else ending
        if usage is None and ending == "answered":
            usage = ticket.bounds.unreported(ticket.out_bytes)
        elif usage is None and ending == "incomplete":
            usage = ticket.bounds.reservation()
        ticket.usage = usage
        if usage is not None:
            ticket.cost = ticket.bounds.price.cost(usage.prompt_tokens, usage.completion_tokens)
        async with state.cond:
            state.cost += ticket.cost
            state.requests += 1
            if state.tree is not None:
                state.tree.cost += ticket.cost
                state.tree.reserved -= ticket.reserved
                state.tree.inflight -= 1
            if usage is not None:
                state.tokens_in += usage.prompt_tokens
                state.tokens_out += usage.completion_tokens
            state.reserved -= ticket.reserved
            state.inflight -= 1
            state.pending_writes += 1
            ceiling = state.row.cost_ceiling_usd
            if (
                ceiling is not None
                and state.cost >= ceiling
                and state.row.status == ExecutionStatus.ACTIVE
            ):
                ticket.killed = True
                reason = f"cost ceiling ${ceiling} reached (spent ${state.cost:.6f})"
                state.row = state.row.model_copy(
                    update={"status": ExecutionStatus.KILLED, "status_reason": reason}
                )
            state.cond.notify_all()
        for listener in self._listeners:
            listener(ticket)

    async def persist(self, ticket: Ticket) -> None:
        """Write the settled request to the ledger (after its response went out)."""
        state = ticket.state
        try:
            usage = ticket.usage
            tokens_in = usage.prompt_tokens if usage else 0
            tokens_out = usage.completion_tokens if usage else 0
            if ticket.hold is not None and self.holds is not None:
                row = await self.holds.settle(
                    ticket.hold, tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=ticket.cost
                )
            else:
                row = await self.ledger.record_usage(
                    ticket.claims.execution_id,
                    tokens_in=tokens_in,
                    tokens_out=tokens_out,
                    cost_usd=ticket.cost,
                )
            if ticket.killed:
                row = await self.ledger.set_execution_status(
                    row.execution_id, ExecutionStatus.KILLED, state.row.status_reason
                )
            if ticket.killed or state.row.status == ExecutionStatus.ACTIVE:
                state.row = row
        finally:
            async with state.cond:
                state.pending_writes -= 1
                state.cond.notify_all()
            self.runs.forget_if_done(ticket.claims.execution_id, state)
