"""Admission: whether a request may start now, against its run's and its tree's ceilings.

Each request's bounds come from ``estimate`` (the whole request as sent: messages, tools, tool
results, images, n x the output cap). While the unreserved remainder covers a request's upper
bound, requests run concurrently, each reserving it. The first time one does not fit, the
execution (and, for a delegation tree, the whole tree) turns *serial* for good: a request is
then admitted only when no other is in flight, while spend < ceiling, and only if its lower
bound fits what is left (else 402 with the figures).

With a ledger shared by processes the same rule is applied once more to the ledger's figures,
read under the budget's lock (``_shared_rule``), and the request holds its worst case there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import partial
from typing import Protocol

from synthorg.domain.money import fits, fits_or_alone
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.estimate import Bounds, bounds, output_cap
from synthorg.gateway.providers.base import Provider
from synthorg.gateway.refusals import check_fits, check_run_open, tree_closed
from synthorg.gateway.signer import BearerClaims
from synthorg.gateway.state import RunState, RunStates
from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import ChatRequest
from synthorg.store.protocol import BudgetFigures, BudgetHold, ExecutionStatus


class HoldTaker(Protocol):
    """Takes a request's hold in a ledger shared by processes (``SharedBudget``)."""

    async def hold(
        self,
        *,
        execution_id: str,
        conversation_id: str,
        amount: Decimal,
        tokens_in: int,
        tokens_out: int,
        admit: Callable[[BudgetFigures], bool],
    ) -> BudgetHold:
        """Hold ``amount`` once ``admit`` accepts the ledger's figures (it raises to refuse)."""
        ...


class Admission:
    """Admits requests against the runs' and trees' ceilings, in process and across processes."""

    def __init__(
        self,
        config: GatewayConfig,
        runs: RunStates,
        providers: Mapping[str, Provider],
        holds: HoldTaker | None,
    ) -> None:
        self.config = config
        self.runs = runs
        self.providers = providers
        self.holds = holds

    def forwarded(self, request: ChatRequest, model: str) -> ChatRequest:
        """The request as the upstream gets it: its model id, and an output cap always set."""
        update: dict[str, object] = {"model": model}
        if request.output_cap() is None:
            # Reserve the model's maximum and make the upstream enforce it.
            update["max_completion_tokens"] = output_cap(request, self.config, model)
        return request.model_copy(update=update)

    def bounds(self, request: ChatRequest) -> Bounds:
        """The cost bounds of a forwarded request (what admission reserves and refuses on)."""
        return bounds(request, request.to_json(), self.config, request.model)

    async def admit(self, claims: BearerClaims, request: ChatRequest, model: str) -> Ticket:
        """Admit a request for ``model`` (the bound one), or refuse it (402)."""
        state = await self.runs.load(claims)
        forwarded = self.forwarded(request, model)
        limits = self.bounds(forwarded)
        worst = limits.worst
        tree = state.tree
        _check_open(state)
        _check_all_fit(state, limits)
        if not state.serial and not fits(
            state.row.cost_ceiling_usd, state.cost, state.reserved, worst
        ):
            state.serial = True
        if (
            tree is not None
            and not tree.serial
            and not fits(tree.ceiling, tree.cost, tree.reserved, worst)
        ):
            tree.serial = True  # from now on one request at a time in the whole tree

        def alone() -> bool:
            return (not state.serial or state.inflight == 0) and (
                tree is None or not tree.serial or tree.inflight == 0
            )

        if state.serial or (tree is not None and tree.serial):
            async with state.cond:
                await state.cond.wait_for(alone)
                _check_open(state)  # the request before may have crossed it
                _check_all_fit(state, limits)
        state.inflight += 1
        state.reserved += worst
        if tree is not None:
            tree.inflight += 1
            tree.reserved += worst
        ticket = Ticket(
            claims=claims,
            provider=self.providers[claims.provider],
            model=model,
            request=forwarded,
            bounds=limits,
            reserved=worst,
            started=time.perf_counter(),
            state=state,
        )
        if self.holds is not None:
            seen: list[BudgetFigures] = []
            try:
                ticket.hold = await self.holds.hold(
                    execution_id=claims.execution_id,
                    conversation_id=claims.conversation_id,
                    amount=worst,
                    tokens_in=limits.prompt_max,
                    tokens_out=limits.output_max,
                    admit=partial(_shared_rule, limits, seen),
                )
            except BaseException:
                await _unadmit(ticket)
                raise
            finally:
                if seen:
                    _learn(state, seen[-1])
        return ticket


def _shared_rule(limits: Bounds, seen: list[BudgetFigures], figures: BudgetFigures) -> bool:
    """Admission against the shared ledger's figures (read under the budget's lock): the
    in-process rule, with every process's spend and holds. Raises to refuse; False to wait.

    Pure but for noting the figures in ``seen``: a store may call it on its writer thread.
    """
    seen.append(figures)
    row = figures.execution
    check_run_open(row, row.cost_usd)
    ceiling, worst, fits = row.cost_ceiling_usd, limits.worst, True
    if ceiling is not None:
        check_fits(f"execution {row.execution_id!r}", limits, ceiling, row.cost_usd)
        fits = fits_or_alone(ceiling, row.cost_usd, figures.reserved, worst)
    tree = figures.tree
    if tree is not None:
        refused = tree_closed(tree.root_id, tree.ceiling, tree.spent)
        if refused is not None:
            raise refused
        name = f"the delegation tree of conversation {tree.root_id!r}"
        check_fits(name, limits, tree.ceiling, tree.spent)
        fits = fits and fits_or_alone(tree.ceiling, tree.spent, figures.tree_reserved, worst)
    return fits


def _learn(state: RunState, figures: BudgetFigures) -> None:
    """Take in what other processes spent (and whether they killed the run), seen at once."""
    row = figures.execution
    state.cost = max(state.cost, row.cost_usd)
    if state.row.status != ExecutionStatus.KILLED:
        state.row = row
    if figures.tree is not None and state.tree is not None:
        state.tree.cost = max(state.tree.cost, figures.tree.spent)


async def _unadmit(ticket: Ticket) -> None:
    """Give back the in-process admission of a request the shared ledger did not admit."""
    state = ticket.state
    async with state.cond:
        state.inflight -= 1
        state.reserved -= ticket.reserved
        if state.tree is not None:
            state.tree.inflight -= 1
            state.tree.reserved -= ticket.reserved
        state.cond.notify_all()


def _check_open(state: RunState) -> None:
    check_run_open(state.row, state.cost)
    refused = state.tree.closed() if state.tree is not None else None
    if refused is not None:
        raise refused


def _check_all_fit(state: RunState, limits: Bounds) -> None:
    ceiling = state.row.cost_ceiling_usd
    if ceiling is not None:
        check_fits(f"execution {state.row.execution_id!r}", limits, ceiling, state.cost)
    tree = state.tree
    if tree is not None:
        name = f"the delegation tree of conversation {tree.root_id!r}"
        check_fits(name, limits, tree.ceiling, tree.cost)
