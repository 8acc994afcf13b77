"""The gateway's ledger on PostgreSQL: one row per execution, its usage, ceiling, status."""

from __future__ import annotations

from decimal import Decimal

from psycopg.rows import dict_row

from synthorg.errors import NotFoundError
from synthorg.store import codec
from synthorg.store.postgres_conversations import PostgresConversations
from synthorg.store.protocol import ExecutionStatus, ExecutionUsage, TreeBudget
from synthorg.store.tree_budget import TREE_COSTS_SQL, read_tree_budget


class PostgresLedger(PostgresConversations):
    """The ``executions`` table (mixed into PostgresStore)."""

    async def open_execution(
        self,
        *,
        execution_id: str,
        conversation_id: str,
        model: str,
        provider: str,
        cost_ceiling_usd: Decimal | None,
    ) -> ExecutionUsage:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO executions (execution_id, conversation_id, model, provider,"
                " cost_ceiling_usd, cost_usd, status, created_at, updated_at, lease_expires_at)"
                " VALUES (%s, %s, %s, %s, %s, 0, %s, now(), now(), (SELECT expires_at FROM"
                " conversation_owners WHERE conversation_id = %s))"
                " ON CONFLICT (execution_id) DO NOTHING",
                (
                    execution_id,
                    conversation_id,
                    model,
                    provider,
                    cost_ceiling_usd,
                    ExecutionStatus.ACTIVE.value,
                    conversation_id,
                ),
            )
        return await self.get_execution(execution_id)

    async def record_usage(
        self, execution_id: str, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        # One statement: concurrent recorders in any process never lose an add.
        row = await self._one(
            "UPDATE executions SET requests = requests + 1, tokens_in = tokens_in + %s,"
            " tokens_out = tokens_out + %s, cost_usd = cost_usd + %s, updated_at = now()"
            " WHERE execution_id = %s RETURNING *",
            (tokens_in, tokens_out, cost_usd, execution_id),
        )
        if row is None:
            raise NotFoundError(f"no execution {execution_id} in the ledger")
        return codec.execution_from_row(row)

    async def get_execution(self, execution_id: str) -> ExecutionUsage:
        row = await self._one("SELECT * FROM executions WHERE execution_id = %s", (execution_id,))
        if row is None:
            raise NotFoundError(f"no execution {execution_id} in the ledger")
        return codec.execution_from_row(row)

    async def executions_of(self, conversation_id: str) -> list[ExecutionUsage]:
        async with self._conn() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT * FROM executions WHERE conversation_id = %s ORDER BY created_at",
                (conversation_id,),
            )
            return [codec.execution_from_row(row) for row in await cur.fetchall()]

    async def set_cost_ceiling(
        self, execution_id: str, cost_ceiling_usd: Decimal | None
    ) -> ExecutionUsage:
        await self._all(
            "UPDATE executions SET cost_ceiling_usd = %s, updated_at = now()"
            " WHERE execution_id = %s RETURNING execution_id",
            (cost_ceiling_usd, execution_id),
        )
        return await self.get_execution(execution_id)

    async def tree_budget(self, conversation_id: str) -> TreeBudget | None:
        sql = TREE_COSTS_SQL.format(mark="%s")

        async def costs(root_id: str) -> list[object]:
            return [row[0] for row in await self._all(sql, (root_id, root_id))]

        return await read_tree_budget(conversation_id, self.get_conversation, costs)

    async def set_execution_status(
        self, execution_id: str, status: ExecutionStatus, reason: str = ""
    ) -> ExecutionUsage:
        # Killed is final: the guard is in the statement so a racing update cannot revive it.
        await self._all(
            "UPDATE executions SET status = %s, status_reason = %s, updated_at = now()"
            " WHERE execution_id = %s AND status <> %s RETURNING execution_id",
            (status.value, reason, execution_id, ExecutionStatus.KILLED.value),
        )
        return await self.get_execution(execution_id)
