"""Budget reservations on PostgreSQL: admission against the ledger every process shares.

One budget (a delegation tree, named by its root; else the conversation) has one lock: an
advisory transaction lock on its key, so admissions of that budget in any process take turns.
Under it an admission bills the holds whose lease ran out (their holder died mid-request; the
upstream may have billed up to the whole reservation, as for any incomplete request), reads
spend and live holds in one statement and stores its own hold (a new run's grant reads its
conversation's spend plus holds the same way, under the same lock). Settling is one statement
that deletes the hold and adds the bill, so no reader ever sees the hold gone and the cost
missing; a hold that has already expired (and been billed in full) is never used twice: its
late settle adds only what the bill exceeds it by.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import dict_row

from synthorg.domain.money import money
from synthorg.errors import NotFoundError
from synthorg.store import codec
from synthorg.store.protocol import (
    OVERREPORT,
    BudgetFigures,
    BudgetHold,
    ExecutionStatus,
    ExecutionUsage,
    TreeBudget,
)

_LOCK = (
    "SELECT k, pg_advisory_xact_lock(hashtextextended('synthorg-budget:' || k, 0))"
    " FROM (SELECT coalesce((SELECT coalesce(root_id, id) FROM conversations WHERE id = %s),"
    " %s) AS k) AS budget"
)
"""Lock the budget of a conversation (its tree's root, else itself); returns the key."""

_BILL_EXPIRED = """
WITH gone AS (
    DELETE FROM budget_reservations
    WHERE budget_key = %(key)s AND expires_at < clock_timestamp()
    RETURNING execution_id, amount, tokens_in, tokens_out
), per AS (
    SELECT execution_id, sum(amount) AS amount, sum(tokens_in) AS tin, sum(tokens_out) AS tout,
           count(*) AS n
    FROM gone GROUP BY execution_id
), billed AS (
    UPDATE executions e SET cost_usd = e.cost_usd + per.amount,
        tokens_in = e.tokens_in + per.tin, tokens_out = e.tokens_out + per.tout,
        requests = e.requests + per.n, updated_at = now()
    FROM per WHERE e.execution_id = per.execution_id RETURNING e.execution_id
)"""
"""Bill the budget's expired holds in full to their executions (the incomplete bill): the one
expiry, run under the budget's lock by every statement that reads its figures. The statement
it opens reads the snapshot taken after the lock, where expired holds are still holds and not
yet cost."""

_FIGURES = (
    _BILL_EXPIRED  # noqa: S608  (constants only; every value is a bound parameter)
    + """, expired AS (
    SELECT coalesce(sum(amount), 0) AS total,
        coalesce(sum(amount) FILTER (WHERE execution_id = %(eid)s), 0) AS own
    FROM per
)
SELECT e.*, e.cost_usd + expired.own AS spent,
    (SELECT coalesce(sum(amount), 0) FROM budget_reservations r
        WHERE r.execution_id = e.execution_id) - expired.own AS held,
    (SELECT (state->>'budget_usd')::numeric FROM conversations WHERE id = %(key)s) AS tree_ceiling,
    (SELECT coalesce(sum(x.cost_usd), 0) FROM executions x
        JOIN conversations c ON c.id = x.conversation_id
        WHERE c.id = %(key)s OR c.root_id = %(key)s) + expired.total AS tree_spent,
    (SELECT coalesce(sum(amount), 0) FROM budget_reservations r
        WHERE r.budget_key = %(key)s) - expired.total AS tree_held
FROM executions e, expired WHERE e.execution_id = %(eid)s
"""
)
"""Bill the expired holds and read the spend and live holds of the execution and of its tree:
the figures move the expired holds from held to spent."""

_COMMITTED = (
    _BILL_EXPIRED  # noqa: S608  (constants only; every value is a bound parameter)
    + """
SELECT (SELECT coalesce(sum(x.cost_usd), 0) FROM executions x
        WHERE x.conversation_id = ANY(%(members)s))
    + (SELECT coalesce(sum(r.amount), 0) FROM budget_reservations r
        JOIN executions x ON x.execution_id = r.execution_id
        WHERE x.conversation_id = ANY(%(members)s))
"""
)
"""Bill the expired holds and read what the members' runs spent plus every hold they have:
in the snapshot an expired hold is still a hold, so it is counted once either way."""

_HOLD = (
    "INSERT INTO budget_reservations (reservation_id, budget_key, execution_id, holder, amount,"
    " tokens_in, tokens_out, created_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s,"
    " clock_timestamp(), clock_timestamp() + make_interval(secs => %s))"
)

_SETTLE = """
WITH gone AS (
    DELETE FROM budget_reservations WHERE reservation_id = %(rid)s RETURNING 1
), held AS (SELECT count(*) AS n FROM gone)
UPDATE executions SET requests = requests + held.n,
    tokens_in = tokens_in + held.n * %(tin)s, tokens_out = tokens_out + held.n * %(tout)s,
    cost_usd = cost_usd + CASE WHEN held.n > 0 THEN %(cost)s
                               ELSE greatest(%(cost)s - %(amount)s, 0) END,
    updated_at = now()
FROM held WHERE execution_id = %(eid)s RETURNING executions.*
"""
"""Replace the hold by the bill; an expired hold (billed in full already) adds the excess."""


class PostgresBudget:
    """SharedBudgetLedger on PostgreSQL (mixed into PostgresStore)."""

    _conn: Callable[[], contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]

    async def reserve_budget(
        self,
        hold: BudgetHold,
        *,
        holder: str,
        lease_s: float,
        admit: Callable[[BudgetFigures], bool],
    ) -> bool:
        async with self._conn() as conn, conn.transaction():
            cur = await conn.execute(_LOCK, (hold.conversation_id, hold.conversation_id))
            locked = await cur.fetchone()
            assert locked is not None
            key = str(locked[0])
            async with conn.cursor(row_factory=dict_row) as rows:
                await rows.execute(_FIGURES, {"key": key, "eid": hold.execution_id})
                row = await rows.fetchone()
            if row is None:
                raise NotFoundError(f"no execution {hold.execution_id} in the ledger")
            ceiling = row["tree_ceiling"]
            figures = BudgetFigures(
                execution=codec.execution_from_row({**row, "cost_usd": row["spent"]}),
                reserved=money(row["held"]),
                tree=None
                if ceiling is None
                else TreeBudget(
                    root_id=key,
                    ceiling=money(ceiling),
                    spent=money(row["tree_spent"]),
                ),
                tree_reserved=money(row["tree_held"]),
            )
            if not admit(figures):
                return False
            await conn.execute(
                _HOLD,
                (
                    hold.reservation_id,
                    key,
                    hold.execution_id,
                    holder,
                    hold.amount,
                    hold.tokens_in,
                    hold.tokens_out,
                    lease_s,
                ),
            )
            return True

    async def committed_budget(self, conversation_id: str, members: Sequence[str]) -> Decimal:
        async with self._conn() as conn, conn.transaction():
            cur = await conn.execute(_LOCK, (conversation_id, conversation_id))
            locked = await cur.fetchone()
            assert locked is not None
            cur = await conn.execute(_COMMITTED, {"key": locked[0], "members": list(members)})
            row = await cur.fetchone()
            assert row is not None
            return money(row[0])

    async def settle_reservation(
        self, hold: BudgetHold, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        params = {
            "rid": hold.reservation_id,
            "tin": tokens_in,
            "tout": tokens_out,
            "cost": cost_usd,
            "amount": hold.amount,
            "eid": hold.execution_id,
        }
        async with self._conn() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_SETTLE, params)
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError(f"no execution {hold.execution_id} in the ledger")
        return codec.execution_from_row(row)

    async def overreporting_providers(self) -> dict[str, int]:
        async with self._conn() as conn:
            cur = await conn.execute(
                "SELECT provider, count(*) FROM executions WHERE status = %s"
                " AND status_reason LIKE %s GROUP BY provider ORDER BY provider",
                (ExecutionStatus.KILLED.value, f"{OVERREPORT}:%"),
            )
            return {str(provider): int(n) for provider, n in await cur.fetchall()}

    async def renew_reservations(
        self, holder: str, reservation_ids: Sequence[str], *, lease_s: float
    ) -> int:
        async with self._conn() as conn:
            cur = await conn.execute(
                "UPDATE budget_reservations"
                " SET expires_at = clock_timestamp() + make_interval(secs => %s)"
                " WHERE holder = %s AND reservation_id = ANY(%s)",
                (lease_s, holder, list(reservation_ids)),
            )
            return cur.rowcount
