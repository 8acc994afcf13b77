"""The Gateway service: bearer + binding checks, per-execution admission, metering, the hard kill.

The ceiling invariant: an execution's spend never exceeds its ceiling by more than the largest
*reservation* of one admitted request. Each request's bounds come from ``estimate`` (the whole
request as sent: messages, tools, tool results, images, n x the output cap). While the
unreserved remainder covers a request's upper bound, requests run concurrently, each reserving
it. The first time one does not fit, the execution turns *serial* for good: a request is then
admitted only when no other is in flight, while spend < ceiling, and only if its lower bound
fits what is left (else 402 with the figures). A stream crossing the ceiling is cut.

Every admitted request is settled exactly once on every path: from the upstream's usage when it
reports it, otherwise from the conservative bill in ``estimate``. Ledger writes happen after the
response is sent; the in-memory totals (which include settled but not yet persisted requests)
drive admission, so a write's latency never admits too much.

A delegation tree has one budget on top (``LedgerStore.tree_budget``: the root's budget against
the ledger of every run under it, across restarts). Every execution of the tree shares one
``_Tree`` and its condition, and is admitted by the same rule against it as against its own
ceiling: concurrent while the tree's unreserved remainder covers the request, then serial across
the whole tree. So parent plus children never exceed the root's ceiling by more than one
request in total, however many children run at once.

With a ledger shared by processes (PostgreSQL) each admitted request also holds its worst case
in the ledger (``shared_budget.py``) under the same rule read from the ledger's figures: a
request fits what neither the ledger's spend nor every process's live holds take, or it is the
only one holding; so gateways in any number of processes together stay within one request of
each ceiling (see docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Literal

from synthorg.errors import NotFoundError, SynthOrgError
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.estimate import Bounds, Ending, bounds, output_cap
from synthorg.gateway.liveness import run_closed
from synthorg.gateway.providers.base import Provider
from synthorg.gateway.shared_budget import SharedBudget
from synthorg.gateway.signer import BearerClaims, BearerError, GatewaySigner, RunBinding
from synthorg.gateway.wire import REQUEST_EXCEEDS_BUDGET, ChatRequest, Usage
from synthorg.store.protocol import (
    BudgetFigures,
    BudgetHold,
    ExecutionStatus,
    ExecutionUsage,
    LedgerStore,
    SharedBudgetLedger,
    TreeBudget,
)


class GatewayRefusal(SynthOrgError):
    """A request the gateway refuses; carries the HTTP status and OpenAI error type/code."""

    def __init__(self, status: int, message: str, type_: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code


def _unauthorized(message: str) -> GatewayRefusal:
    return GatewayRefusal(401, message, "authentication_error", "invalid_bearer")


def _forbidden(message: str, code: str) -> GatewayRefusal:
    return GatewayRefusal(403, message, "permission_error", code)


@dataclass
class _Tree:
    """The admission state of a delegation tree's one budget, shared by all its executions."""

    root_id: str
    ceiling: Decimal
    cost: Decimal
    """The tree's spend: the ledger's, plus what this process settled and has not written."""
    loaded_at: float
    members: set[str] = field(default_factory=set)
    cond: asyncio.Condition = field(default_factory=asyncio.Condition)
    reserved: Decimal = Decimal(0)
    inflight: int = 0
    serial: bool = False

    def closed(self) -> GatewayRefusal | None:
        return _tree_closed(self.root_id, self.ceiling, self.cost)


def _tree_closed(root_id: str, ceiling: Decimal, spent: Decimal) -> GatewayRefusal | None:
    if spent < ceiling:
        return None
    return GatewayRefusal(
        402,
        f"the delegation tree of conversation {root_id!r} reached its cost ceiling of "
        f"${ceiling} (spent ${spent:.6f} by it and the runs it delegated)",
        "insufficient_quota",
        "cost_ceiling_reached",
    )


def _fits_or_alone(ceiling: Decimal, spent: Decimal, held: Decimal, worst: Decimal) -> bool:
    """The admission rule on shared figures: concurrent while it fits, else only alone."""
    return held == 0 or ceiling - spent - held >= worst


@dataclass
class _Execution:
    """Cached ledger row plus the admission state of one execution."""

    row: ExecutionUsage
    loaded_at: float
    cost: Decimal
    tree: _Tree | None = None
    """The delegation tree whose budget it shares (its ``cond`` is the tree's)."""
    tokens_in: int = 0
    tokens_out: int = 0
    requests: int = 0
    cond: asyncio.Condition = field(default_factory=asyncio.Condition)
    reserved: Decimal = Decimal(0)
    inflight: int = 0
    serial: bool = False
    pending_writes: int = 0
    finished: bool = False
    """The run ended with requests still in flight: forgotten once the last is written."""


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
    _state: _Execution
    out_bytes: int = 0
    reported: Usage | None = None
    """The last usage the upstream reported (a stream may report it before its end)."""
    settled: bool = False
    billed_as: Ending | Literal["reported"] | None = None
    """How the bill was made: the upstream's usage, or an estimate for how it ended."""
    cost: Decimal = Decimal(0)
    usage: Usage | None = None
    killed: bool = False
    hold: BudgetHold | None = None
    """Its hold in a shared ledger (None when the ledger is this process's alone)."""

    @property
    def ceiling(self) -> Decimal | None:
        """The execution's cost ceiling."""
        return self._state.row.cost_ceiling_usd

    def tree_closed(self) -> GatewayRefusal | None:
        """Why the run's delegation tree admits no more requests; None while it does."""
        tree = self._state.tree
        return tree.closed() if tree is not None else None

    def streamed(self, out_bytes: int) -> bool:
        """Count streamed output; False when the ceiling is crossed and the stream must be cut."""
        self.out_bytes += out_bytes
        # Cut when the stream has certainly crossed (its least cost so far): an honest stream
        # is never cut short of the ceiling; its bill is still the conservative estimate.
        least = self.bounds.least_so_far(self.out_bytes)
        tree = self._state.tree
        if tree is not None and tree.cost + least >= tree.ceiling:
            return False
        ceiling = self.ceiling
        return ceiling is None or self._state.cost + least < ceiling


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
        self._clock = clock
        self._executions: dict[str, _Execution] = {}
        self._trees: dict[str, _Tree] = {}
        self._provider_names = frozenset(p.name for p in config.providers)
        self._listeners: list[Callable[[Ticket], None]] = []
        self._shared = (
            SharedBudget(ledger, config.reservation_lease_s)
            if isinstance(ledger, SharedBudgetLedger)
            else None
        )

    # -- service API used by runners and loops ------------------------------------------------

    async def open_execution(self, binding: RunBinding) -> ExecutionUsage:
        """Create the ledger row of a run (idempotent); call before minting its bearer."""
        row = await self._open_row(binding)
        self._forget(binding.execution_id)
        return row

    async def _open_row(self, binding: RunBinding) -> ExecutionUsage:
        return await self.ledger.open_execution(
            execution_id=binding.execution_id,
            conversation_id=binding.conversation_id,
            model=binding.model_id,
            provider=binding.provider,
            cost_ceiling_usd=binding.cost_ceiling,
        )

    def mint(self, binding: RunBinding, *, ttl_s: int | None = None) -> str:
        """A bearer for ``binding`` (explicit provider binding checked by the signer)."""
        return self.signer.mint(binding, ttl_s=ttl_s or self.config.token_ttl_s)

    async def usage(self, execution_id: str) -> ExecutionUsage:
        """Running totals of an execution, including every answered request.

        Served from memory for executions this gateway meters (requests are settled before
        they are answered, so the totals are exact without waiting for the ledger write);
        from the ledger otherwise.
        """
        state = self._executions.get(execution_id)
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
        state = self._executions.get(execution_id)
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
        state = self._executions.get(execution_id)
        if state is not None and state.inflight:
            state.finished = True
        else:
            self._forget(execution_id)
        return row

    def _forget(self, execution_id: str) -> None:
        """Drop a run's admission state (and its tree's, once no run of the tree is left)."""
        state = self._executions.pop(execution_id, None)
        if state is not None and state.tree is not None:
            state.tree.members.discard(execution_id)
            if not state.tree.members:
                self._trees.pop(state.tree.root_id, None)

    async def set_ceiling(self, execution_id: str, ceiling: Decimal | None) -> ExecutionUsage:
        """Change a run's cost ceiling at once (delegation lends part of it to children).

        Admission reads the in-memory row, so the new ceiling holds from the next request on;
        the ledger keeps it for other processes and after a restart.
        """
        row = await self.ledger.set_cost_ceiling(execution_id, ceiling)
        state = self._executions.get(execution_id)
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
        state = self._executions.get(execution_id)
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

    # -- per-request path -----------------------------------------------------------------------

    def authenticate(self, authorization: str | None) -> BearerClaims:
        """The verified claims of the request's bearer; 401 otherwise."""
        if not authorization:
            raise _unauthorized("missing bearer: send 'Authorization: Bearer <run token>'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("malformed Authorization header: expected 'Bearer <run token>'")
        try:
            return self.signer.verify(token.strip())
        except BearerError as exc:
            raise _unauthorized(str(exc)) from exc

    def resolve_model(self, claims: BearerClaims, requested: str) -> str:
        """The upstream model id for ``requested``; 403 unless it is exactly the bound one."""
        bound, provider = claims.model_id, claims.provider
        if requested in (bound, f"openai/{bound}", f"{provider}/{bound}"):
            if not self.config.serves(provider, bound) or provider not in self.providers:
                raise _forbidden(
                    f"bearer is bound to provider {provider!r} / model {bound!r}, which this "
                    "gateway does not serve",
                    "unbound_model",
                )
            return bound
        prefix, sep, _ = requested.partition("/")
        if sep and prefix in self._provider_names and prefix not in (provider, "openai"):
            raise _forbidden(
                f"bearer is bound to provider {provider!r}; provider {prefix!r} was requested",
                "provider_mismatch",
            )
        raise _forbidden(
            f"bearer is bound to model {bound!r}; model {requested!r} was requested",
            "model_mismatch",
        )

    async def _state(self, claims: BearerClaims) -> _Execution:
        state = self._executions.get(claims.execution_id)
        now = self._clock()
        if state is not None and now - state.loaded_at < self.config.ledger_refresh_s:
            return state
        try:
            row = await self.ledger.get_execution(claims.execution_id)
        except NotFoundError:
            # The signature proves the binding: open the row from the claims (mint-only use).
            row = await self._open_row(claims)
        known = self._executions.get(claims.execution_id)
        budget = None
        if known is None or known.tree is not None:  # a run outside any tree stays outside
            budget = await self.ledger.tree_budget(claims.conversation_id)
        state = self._executions.get(claims.execution_id)
        if state is None:
            tree = self._tree(budget, now)
            state = _Execution(
                row=row,
                loaded_at=now,
                cost=row.cost_usd,
                tree=tree,
                tokens_in=row.tokens_in,
                tokens_out=row.tokens_out,
                requests=row.requests,
            )
            if tree is not None:
                tree.members.add(claims.execution_id)
                state.cond = tree.cond
            self._executions[claims.execution_id] = state
        else:  # refresh: status may have been changed by another process
            if state.tree is not None and budget is not None:
                self._tree(budget, now)
            if state.row.status != ExecutionStatus.KILLED:
                state.row = row
            state.cost = max(state.cost, row.cost_usd)
            state.tokens_in = max(state.tokens_in, row.tokens_in)
            state.tokens_out = max(state.tokens_out, row.tokens_out)
            state.requests = max(state.requests, row.requests)
            state.loaded_at = now
        return state

    def _tree(self, budget: TreeBudget | None, now: float) -> _Tree | None:
        """The tree of ``budget`` (made or refreshed; the ledger's spend only ever adds)."""
        if budget is None:
            return None
        tree = self._trees.get(budget.root_id)
        if tree is None:
            tree = _Tree(budget.root_id, budget.ceiling, budget.spent, now)
            self._trees[budget.root_id] = tree
        else:
            tree.ceiling = budget.ceiling
            tree.cost = max(tree.cost, budget.spent)
            tree.loaded_at = now
        return tree

    def _check_open(self, state: _Execution) -> None:
        _check_run_open(state.row, state.cost)
        refused = state.tree.closed() if state.tree is not None else None
        if refused is not None:
            raise refused

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

    async def admit(self, claims: BearerClaims, request: ChatRequest) -> Ticket:
        """Admit a request of the bound model, or refuse it (402 / 403)."""
        model = self.resolve_model(claims, request.model)
        state = await self._state(claims)
        forwarded = self.forwarded(request, model)
        limits = self.bounds(forwarded)
        worst = limits.worst
        tree = state.tree
        self._check_open(state)
        self._check_all_fit(state, limits)
        ceiling = state.row.cost_ceiling_usd
        if (
            ceiling is not None
            and not state.serial
            and ceiling - state.cost - state.reserved < worst
        ):
            state.serial = True
        if (
            tree is not None
            and not tree.serial
            and tree.ceiling - tree.cost - tree.reserved < worst
        ):
            tree.serial = True  # from now on one request at a time in the whole tree

        def alone() -> bool:
            return (not state.serial or state.inflight == 0) and (
                tree is None or not tree.serial or tree.inflight == 0
            )

        if state.serial or (tree is not None and tree.serial):
            async with state.cond:
                await state.cond.wait_for(alone)
                self._check_open(state)  # the request before may have crossed it
                self._check_all_fit(state, limits)
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
            _state=state,
        )
        if self._shared is not None:
            try:
                ticket.hold = await self._shared.hold(
                    execution_id=claims.execution_id,
                    conversation_id=claims.conversation_id,
                    amount=worst,
                    tokens_in=limits.prompt_max,
                    tokens_out=limits.output_max,
                    admit=partial(self._shared_rule, state, limits),
                )
            except BaseException:
                await self._unadmit(ticket)
                raise
        return ticket

    def _shared_rule(self, state: _Execution, limits: Bounds, figures: BudgetFigures) -> bool:
        """Admission against the shared ledger's figures (read under the budget's lock): the
        in-process rule, with every process's spend and holds. Raises to refuse; False to wait.
        """
        row = figures.execution
        state.cost = max(state.cost, row.cost_usd)  # what other processes spent, seen at once
        if state.row.status != ExecutionStatus.KILLED:
            state.row = row
        _check_run_open(row, row.cost_usd)
        ceiling, worst, fits = row.cost_ceiling_usd, limits.worst, True
        if ceiling is not None:
            _check_fits(f"execution {row.execution_id!r}", limits, ceiling, row.cost_usd)
            fits = _fits_or_alone(ceiling, row.cost_usd, figures.reserved, worst)
        tree = figures.tree
        if tree is not None:
            if state.tree is not None:
                state.tree.cost = max(state.tree.cost, tree.spent)
            refused = _tree_closed(tree.root_id, tree.ceiling, tree.spent)
            if refused is not None:
                raise refused
            name = f"the delegation tree of conversation {tree.root_id!r}"
            _check_fits(name, limits, tree.ceiling, tree.spent)
            fits = fits and _fits_or_alone(tree.ceiling, tree.spent, figures.tree_reserved, worst)
        return fits

    async def _unadmit(self, ticket: Ticket) -> None:
        """Give back the in-process admission of a request the shared ledger did not admit."""
        state = ticket._state
        async with state.cond:
            state.inflight -= 1
            state.reserved -= ticket.reserved
            if state.tree is not None:
                state.tree.inflight -= 1
                state.tree.reserved -= ticket.reserved
            state.cond.notify_all()

    @staticmethod
    def _check_all_fit(state: _Execution, limits: Bounds) -> None:
        ceiling = state.row.cost_ceiling_usd
        if ceiling is not None:
            _check_fits(f"execution {state.row.execution_id!r}", limits, ceiling, state.cost)
        tree = state.tree
        if tree is not None:
            name = f"the delegation tree of conversation {tree.root_id!r}"
            _check_fits(name, limits, tree.ceiling, tree.cost)

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
        state = ticket._state
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

    def on_settle(self, listener: Callable[[Ticket], None]) -> None:
        """Call ``listener`` with every ticket once it is settled (metrics, audits, tests)."""
        self._listeners.append(listener)

    async def persist(self, ticket: Ticket) -> None:
        """Write the settled request to the ledger (after its response went out)."""
        state = ticket._state
        try:
            usage = ticket.usage
            tokens_in = usage.prompt_tokens if usage else 0
            tokens_out = usage.completion_tokens if usage else 0
            if ticket.hold is not None and self._shared is not None:
                row = await self._shared.settle(
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
            execution_id = ticket.claims.execution_id
            if (
                state.finished
                and not state.inflight
                and not state.pending_writes
                and self._executions.get(execution_id) is state
            ):
                self._forget(execution_id)


def _check_run_open(row: ExecutionUsage, spent: Decimal) -> None:
    closed = run_closed(row, spent=spent)  # the rule shared with the MCP server
    if closed is not None:
        type_ = "insufficient_quota" if closed.status == 402 else "permission_error"
        raise GatewayRefusal(closed.status, closed.message, type_, closed.code)


def _check_fits(name: str, limits: Bounds, ceiling: Decimal, spent: Decimal) -> None:
    left = ceiling - spent
    if limits.least > left:
        raise GatewayRefusal(
            402,
            f"{name}: this request costs at least ${limits.least:.6f} ({limits.prompt_min} "
            f"prompt tokens), more than the ${left:.6f} left of its cost ceiling of ${ceiling} "
            f"(spent ${spent:.6f}); send a shorter request",
            "insufficient_quota",
            REQUEST_EXCEEDS_BUDGET,
        )
