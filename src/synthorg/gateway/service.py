"""The Gateway service: the one object runners and the HTTP app use, over its parts.

Its parts, one job each: ``binding`` (the bearer and the one provider/model it is bound to),
``admission`` (whether a request may start), ``metering`` (each request billed once, the hard
kill at the ceiling), ``state`` (the runs and trees metered here, from the ledger) and
``shared_budget`` (holds in a ledger shared by processes). This module owns a run's life in
the gateway: opened, its ceiling changed, finished or killed, its usage read.

The ceiling invariant: an execution's spend never exceeds its ceiling by more than the largest
*reservation* of one admitted request. While the unreserved remainder covers a request's upper
bound, requests run concurrently, each reserving it; the first time one does not fit, the
execution turns serial for good (see ``admission``). A stream crossing the ceiling is cut.
Every admitted request is settled exactly once on every path (see ``metering``).

A delegation tree has one budget on top (``LedgerStore.tree_budget``: the root's budget against
the ledger of every run under it, across restarts). Every execution of the tree shares one
``TreeState`` and its condition, and is admitted by the same rule against it as against its
own ceiling: concurrent while the tree's unreserved remainder covers the request, then serial
across the whole tree. So parent plus children never exceed the root's ceiling by more than
one request in total, however many children run at once.

With a ledger shared by processes (PostgreSQL) each admitted request also holds its worst case
in the ledger (``shared_budget.py``) under the same rule read from the ledger's figures: a
request fits what neither the ledger's spend nor every process's live holds take, or it is the
only one holding; so gateways in any number of processes together stay within one request of
each ceiling (see docs/architecture.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from decimal import Decimal

from synthorg.domain.binding import RunBinding
from synthorg.gateway.admission import Admission
from synthorg.gateway.binding import authenticate, resolve_model
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.estimate import Bounds, Ending
from synthorg.gateway.metering import Meter
from synthorg.gateway.providers.base import Provider
from synthorg.gateway.shared_budget import SharedBudget
from synthorg.gateway.signer import BearerClaims, GatewaySigner
from synthorg.gateway.state import RunStates, open_row
from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import ChatRequest, Usage
from synthorg.store.protocol import (
    ExecutionStatus,
    ExecutionUsage,
    LedgerStore,
    SharedBudgetLedger,
)


class Gateway:
    """The authoritative cost sink: verifies bearers, admits, meters and kills executions."""

    def __init__(
        self,
        config: GatewayConfig,
        signer: GatewaySigner,
        ledger: LedgerStore,
        providers: Mapping[str, Provider],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.signer = signer
        self.ledger = ledger
        self.providers = dict(providers)
        self._runs = RunStates(ledger, config, clock)
        self._shared = (
            SharedBudget(ledger, config.reservation_lease_s)
            if isinstance(ledger, SharedBudgetLedger)
            else None
        )
        self._admission = Admission(config, self._runs, self.providers, self._shared)
        self._meter = Meter(ledger, self._runs, self._shared)

    # -- a run's life, used by runners and loops ----------------------------------------------

    async def issue(self, binding: RunBinding, *, ttl_s: int | None = None) -> str:
        """The one way a run's bearer is issued: open its execution's ledger row, then mint
        the bearer naming this ledger, valid ``ttl_s`` seconds (default and most: the config's
        ``token_ttl_s``). What the signer refuses (a lifetime out of bounds, a model its
        provider does not serve) is refused before the row is opened. Opening is idempotent;
        the row lives on the conversation's owner's lease (``LedgerStore.open_execution``)."""
        ttl = self.config.token_ttl_s if ttl_s is None else ttl_s
        self.signer.check(binding, ttl_s=ttl)
        await open_row(self.ledger, binding)
        self._runs.forget(binding.execution_id)
        return self.signer.mint(binding, ttl_s=ttl, ledger_id=self.ledger.ledger_id)

    async def usage(self, execution_id: str) -> ExecutionUsage:
        """Running totals of an execution, including every answered request.

        Served from memory for executions this gateway meters (requests are settled before
        they are answered, so the totals are exact without waiting for the ledger write);
        from the ledger otherwise.
        """
        state = self._runs.get(execution_id)
        if state is None:
            return await self.ledger.get_execution(execution_id)
        async with state.cond:
            await state.cond.wait_for(lambda: state.inflight == 0)
            return state.row.model_copy(
                update={
                    "cost_usd": state.cost,
                    "tokens_in": state.tokens_in,
                    "tokens_out": state.tokens_out,
                    "requests": state.requests,
                }
            )

    async def flush(self, execution_id: str) -> None:
        """Wait until every answered request of the execution is written to the ledger."""
        state = self._runs.get(execution_id)
        if state is not None:
            async with state.cond:
                await state.cond.wait_for(lambda: state.pending_writes == 0)

    async def finish_execution(self, execution_id: str, reason: str = "") -> ExecutionUsage:
        """Mark the run finished (its ledger complete): its bearer is refused from now on."""
        await self.flush(execution_id)
        row = await self._set_status(execution_id, ExecutionStatus.FINISHED, reason or "finished")
        # The ledger answers for it from now on (and refuses its bearer): a long-lived
        # process does not keep every run it ever served in memory. Requests still in flight
        # (a stream the sandbox left open) keep it, and its tree, until they are written:
        # forgotten earlier, their reservations and costs would be missing from the tree.
        state = self._runs.get(execution_id)
        if state is not None and state.inflight:
            state.finished = True
        else:
            self._runs.forget(execution_id)
        return row

    async def set_ceiling(self, execution_id: str, ceiling: Decimal | None) -> ExecutionUsage:
        """Change a run's cost ceiling at once (delegation lends part of it to children).

        Admission reads the in-memory row, so the new ceiling holds from the next request on;
        the ledger keeps it for other processes and after a restart.
        """
        row = await self.ledger.set_cost_ceiling(execution_id, ceiling)
        state = self._runs.get(execution_id)
        if state is not None:
            async with state.cond:
                state.row = state.row.model_copy(update={"cost_ceiling_usd": ceiling})
                state.cond.notify_all()
        return row

    async def kill_execution(self, execution_id: str, reason: str) -> ExecutionUsage:
        """Kill the run (operator or ceiling): its bearer is refused from now on."""
        return await self._set_status(execution_id, ExecutionStatus.KILLED, reason)

    async def _set_status(
        self, execution_id: str, status: ExecutionStatus, reason: str
    ) -> ExecutionUsage:
        state = self._runs.get(execution_id)
        # Refuse new requests at once, before the write lands.
        if state is not None and state.row.status != ExecutionStatus.KILLED:
            state.row = state.row.model_copy(update={"status": status, "status_reason": reason})
        row = await self.ledger.set_execution_status(execution_id, status, reason)
        if state is not None:
            state.row = row
        return row

    async def aclose(self) -> None:
        """Close every provider's connections."""
        if self._shared is not None:
            await self._shared.aclose()
        for provider in self.providers.values():
            await provider.aclose()

    # -- per-request path (the HTTP app) ------------------------------------------------------

    def authenticate(self, authorization: str | None) -> BearerClaims:
        """The verified claims of the request's bearer; 401 otherwise."""
        return authenticate(self.signer, authorization, self.ledger.ledger_id)

    def resolve_model(self, claims: BearerClaims, requested: str) -> str:
        """The upstream model id for ``requested``; 403 unless it is exactly the bound one."""
        return resolve_model(self.config, self.providers, claims, requested)

    def forwarded(self, request: ChatRequest, model: str) -> ChatRequest:
        """The request as the upstream gets it: its model id, and an output cap always set."""
        return self._admission.forwarded(request, model)

    def bounds(self, request: ChatRequest) -> Bounds:
        """The cost bounds of a forwarded request (what admission reserves and refuses on)."""
        return self._admission.bounds(request)

    async def admit(self, claims: BearerClaims, request: ChatRequest) -> Ticket:
        """Admit a request of the bound model, or refuse it (402 / 403)."""
        model = self.resolve_model(claims, request.model)
        return await self._admission.admit(claims, request, model)

    async def settle(
        self, ticket: Ticket, usage: Usage | None, ending: Ending = "incomplete"
    ) -> None:
        """Account the request once, in memory (see ``Meter.settle``); persist() writes it."""
        await self._meter.settle(ticket, usage, ending)

    def on_settle(self, listener: Callable[[Ticket], None]) -> None:
        """Call ``listener`` with every ticket once it is settled (metrics, audits, tests)."""
        self._meter.on_settle(listener)

    async def persist(self, ticket: Ticket) -> None:
        """Write the settled request to the ledger (after its response went out)."""
        await self._meter.persist(ticket)
