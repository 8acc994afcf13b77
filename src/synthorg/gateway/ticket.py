"""One admitted request: what it may cost, what it has cost so far, how it was billed."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from synthorg.domain.money import reached
from synthorg.gateway.estimate import Bounds, Ending
from synthorg.gateway.providers.base import Provider
from synthorg.gateway.refusals import GatewayRefusal
from synthorg.gateway.signer import BearerClaims
from synthorg.gateway.state import RunState
from synthorg.gateway.wire import ChatRequest, Usage
from synthorg.store.protocol import BudgetHold


@dataclass
class Ticket:
    """One admitted request: what it may cost, what it has cost so far, how it ended."""

    claims: BearerClaims
    provider: Provider
    model: str
    request: ChatRequest
    """The request as forwarded (upstream model id, output cap set)."""
    bounds: Bounds
    reserved: Decimal
    started: float
    state: RunState
    """The admission state of its run (the gateway's own; listeners only read tickets)."""
    out_bytes: int = 0
    reported: Usage | None = None
    """The last usage the upstream reported (a stream may report it before its end)."""
    settled: bool = False
    billed_as: Ending | Literal["reported"] | None = None
    """How the bill was made: the upstream's usage, or an estimate for how it ended."""
    cost: Decimal = Decimal(0)
    usage: Usage | None = None
    killed: bool = False
    overreport: bool = False
    """The upstream reported a bill over the reservation (``Meter.settle``)."""
    hold: BudgetHold | None = None
    """Its hold in a shared ledger (None when the ledger is this process's alone)."""

    @property
    def ceiling(self) -> Decimal | None:
        """The execution's cost ceiling."""
        return self.state.row.cost_ceiling_usd

    def tree_closed(self) -> GatewayRefusal | None:
        """Why the run's delegation tree admits no more requests; None while it does."""
        tree = self.state.tree
        return tree.closed() if tree is not None else None

    def streamed(self, out_bytes: int) -> bool:
        """Count streamed output; False when the ceiling is crossed and the stream must be cut."""
        self.out_bytes += out_bytes
        # Cut when the stream has certainly crossed (its least cost so far): an honest stream
        # is never cut short of the ceiling; its bill is still the conservative estimate.
        least = self.bounds.least_so_far(self.out_bytes)
        tree = self.state.tree
        if tree is not None and reached(tree.ceiling, tree.cost + least):
            return False
        return not reached(self.ceiling, self.state.cost + least)
