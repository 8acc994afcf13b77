"""Metering: every admitted request billed exactly once, and the run killed at its ceiling.

A request is settled in memory before its answer goes out: from the upstream's usage when it
reports it, otherwise from the conservative bill in ``estimate``. The ledger write happens
after the response is sent; the in-memory totals (which include settled but not yet persisted
requests) drive admission, so a write's latency never admits too much.

An upstream that reports more than a request was admitted for (it ignored the output cap, or
it lies), or sends output certainly past the cap, is billed so, since that is what the provider
will charge, but the bound is broken: its run is killed and its delegation tree closed at once,
the reason names both figures, and it is counted as ``upstream_overreport`` against the
provider.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Protocol

from synthorg.domain.money import over_bound, reached
from synthorg.gateway.estimate import Ending
from synthorg.gateway.state import RunStates
from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import Usage
from synthorg.logging import get_logger
from synthorg.store.protocol import (
    OVERREPORT,
    BudgetHold,
    ExecutionStatus,
    ExecutionUsage,
    LedgerStore,
)

log = get_logger(__name__)


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
        # Only a reported bill, or output certainly past the cap, can exceed the reservation.
        ticket.overreport = over_bound(ticket.cost, ticket.reserved)
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
            reason = None
            if ticket.overreport:
                reason = _overreport_reason(ticket)
                if state.tree is not None and state.tree.killed is None:
                    state.tree.killed = reason  # no run of the tree is admitted from now on
            elif reached(ceiling, state.cost):
                reason = f"cost ceiling ${ceiling} reached (spent ${state.cost:.6f})"
            if reason is not None and state.row.status == ExecutionStatus.ACTIVE:
                ticket.killed = True
                state.row = state.row.model_copy(
                    update={"status": ExecutionStatus.KILLED, "status_reason": reason}
                )
            state.cond.notify_all()
        if ticket.overreport:
            log.warning(
                "upstream_overreport",
                provider=ticket.claims.provider,
                execution_id=ticket.claims.execution_id,
                billed_usd=str(ticket.cost),
                admitted_usd=str(ticket.reserved),
            )
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
            if ticket.killed and ticket.overreport and state.tree is not None:
                await self._kill_tree(ticket)
        finally:
            async with state.cond:
                state.pending_writes -= 1
                state.cond.notify_all()
            self.runs.forget_if_done(ticket.claims.execution_id, state)

    async def _kill_tree(self, ticket: Ticket) -> None:
        """Kill the other runs of the tree metered here, in memory and in the ledger."""
        tree = ticket.state.tree
        assert tree is not None
        reason = f"its delegation tree was killed: {ticket.state.row.status_reason}"
        for member in sorted(tree.members - {ticket.claims.execution_id}):
            other = self.runs.get(member)
            if other is not None and other.row.status == ExecutionStatus.ACTIVE:
                other.row = other.row.model_copy(
                    update={"status": ExecutionStatus.KILLED, "status_reason": reason}
                )
            row = await self.ledger.set_execution_status(member, ExecutionStatus.KILLED, reason)
            if other is not None:
                other.row = row


def _overreport_reason(ticket: Ticket) -> str:
    usage = ticket.usage
    assert usage is not None
    what = "reported usage" if ticket.billed_as == "reported" else "sent output past the cap"
    return (
        f"{OVERREPORT}: provider {ticket.claims.provider!r} {what} costing "
        f"${ticket.cost:.6f} ({usage.prompt_tokens} prompt, {usage.completion_tokens} "
        f"completion tokens) for a request admitted at most ${ticket.reserved:.6f}; "
        "the ledger has that bill and the run was killed"
    )
