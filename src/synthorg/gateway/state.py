"""The admission state of the runs and delegation trees this process meters, from the ledger.

Each run metered here has a ``RunState``: its cached ledger row plus what admission and
metering keep in memory (spend settled but not yet written, reservations, requests in flight).
Every run of one delegation tree shares one ``TreeState`` and its condition, so the tree's one
budget is admitted against under one lock in this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from synthorg.domain.binding import RunBinding
from synthorg.errors import NotFoundError
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.liveness import lapsed
from synthorg.gateway.refusals import GatewayRefusal, forbidden, tree_closed, tree_killed
from synthorg.store.protocol import ExecutionStatus, ExecutionUsage, LedgerStore, TreeBudget


@dataclass
class TreeState:
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
    killed: str | None = None
    """Why the whole tree was killed (an upstream over-reported for one of its runs)."""

    def closed(self) -> GatewayRefusal | None:
        if self.killed is not None:
            return tree_killed(self.root_id, self.killed)
        return tree_closed(self.root_id, self.ceiling, self.cost)


@dataclass
class RunState:
    """Cached ledger row plus the admission state of one execution."""

    row: ExecutionUsage
    loaded_at: float
    cost: Decimal
    tree: TreeState | None = None
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


async def open_row(ledger: LedgerStore, binding: RunBinding) -> ExecutionUsage:
    """Create the ledger row of a run from its binding (idempotent)."""
    return await ledger.open_execution(
        execution_id=binding.execution_id,
        conversation_id=binding.conversation_id,
        model=binding.model_id,
        provider=binding.provider,
        cost_ceiling_usd=binding.cost_ceiling,
    )


class RunStates:
    """The runs (and their trees) this process meters, loaded from the ledger and refreshed
    at most every ``config.ledger_refresh_s``; forgotten when they end."""

    def __init__(
        self, ledger: LedgerStore, config: GatewayConfig, clock: Callable[[], float]
    ) -> None:
        self.ledger = ledger
        self.config = config
        self._clock = clock
        self._runs: dict[str, RunState] = {}
        self._trees: dict[str, TreeState] = {}

    def get(self, execution_id: str) -> RunState | None:
        """The run's state if this process meters it."""
        return self._runs.get(execution_id)

    async def load(self, claims: RunBinding) -> RunState:
        """The run's state: cached, or (re)read from the ledger once older than the refresh.

        A cached lease can only be older than the ledger's, so a cached row whose lease
        looks lapsed is read again before it is judged: a lapse is refused from the moment
        it happens, never for a renewal this process has not seen yet.
        """
        state = self._runs.get(claims.execution_id)
        now = self._clock()
        if (
            state is not None
            and now - state.loaded_at < self.config.ledger_refresh_s
            and not (state.row.status is ExecutionStatus.ACTIVE and lapsed(state.row))
        ):
            return state
        try:
            row = await self.ledger.get_execution(claims.execution_id)
        except NotFoundError as exc:
            # A run's row is opened before its bearer is minted: a bearer without one is
            # another ledger's (a wiped or restored store), never a run to open afresh.
            raise forbidden(
                f"execution {claims.execution_id!r} has no row in this ledger: its bearer "
                "was not issued here, so it cannot act",
                "execution_unknown",
            ) from exc
        known = self._runs.get(claims.execution_id)
        budget = None
        if known is None or known.tree is not None:  # a run outside any tree stays outside
            budget = await self.ledger.tree_budget(claims.conversation_id)
        state = self._runs.get(claims.execution_id)
        if state is None:
            tree = self._tree(budget, now)
            state = RunState(
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
            self._runs[claims.execution_id] = state
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

    def _tree(self, budget: TreeBudget | None, now: float) -> TreeState | None:
        """The tree of ``budget`` (made or refreshed; the ledger's spend only ever adds)."""
        if budget is None:
            return None
        tree = self._trees.get(budget.root_id)
        if tree is None:
            tree = TreeState(budget.root_id, budget.ceiling, budget.spent, now)
            self._trees[budget.root_id] = tree
        else:
            tree.ceiling = budget.ceiling
            tree.cost = max(tree.cost, budget.spent)
            tree.loaded_at = now
        return tree

    def forget(self, execution_id: str) -> None:
        """Drop a run's admission state (and its tree's, once no run of the tree is left)."""
        state = self._runs.pop(execution_id, None)
        if state is not None and state.tree is not None:
            state.tree.members.discard(execution_id)
            if not state.tree.members:
                self._trees.pop(state.tree.root_id, None)

    def forget_if_done(self, execution_id: str, state: RunState) -> None:
        """Forget a run that finished with requests in flight once the last one is written."""
        if (
            state.finished
            and not state.inflight
            and not state.pending_writes
            and self._runs.get(execution_id) is state
        ):
            self.forget(execution_id)
