"""An in-memory LedgerStore: a fast fake FOR UNIT TESTS ONLY (nothing is persisted).

The real ledger is the store backend (``synthorg.store``); this fake implements the same
protocol so gateway logic can be tested without a database.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime
from decimal import Decimal

from synthorg.errors import NotFoundError
from synthorg.store.protocol import OVERREPORT, ExecutionStatus, ExecutionUsage, TreeBudget


class MemoryLedger:
    """LedgerStore kept in a dict. Test double; never use it to run real executions."""

    def __init__(self) -> None:
        self._rows: dict[str, ExecutionUsage] = {}
        self._lock = asyncio.Lock()
        self.ledger_id = f"memory-{secrets.token_hex(8)}"

    async def open_execution(
        self,
        *,
        execution_id: str,
        conversation_id: str,
        model: str,
        provider: str,
        cost_ceiling_usd: Decimal | None,
    ) -> ExecutionUsage:
        """Create the row (idempotent)."""
        async with self._lock:
            row = self._rows.get(execution_id)
            if row is None:
                row = ExecutionUsage(
                    execution_id=execution_id,
                    conversation_id=conversation_id,
                    model=model,
                    provider=provider,
                    cost_ceiling_usd=cost_ceiling_usd,
                    updated_at=datetime.now(UTC),
                )
                self._rows[execution_id] = row
            return row

    async def record_usage(
        self, execution_id: str, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        """Add one request's figures."""
        async with self._lock:
            row = self._get(execution_id)
            row = row.model_copy(
                update={
                    "requests": row.requests + 1,
                    "tokens_in": row.tokens_in + tokens_in,
                    "tokens_out": row.tokens_out + tokens_out,
                    "cost_usd": row.cost_usd + cost_usd,
                    "updated_at": datetime.now(UTC),
                }
            )
            self._rows[execution_id] = row
            return row

    async def get_execution(self, execution_id: str) -> ExecutionUsage:
        """The row; NotFoundError if unknown."""
        return self._get(execution_id)

    async def executions_of(self, conversation_id: str) -> list[ExecutionUsage]:
        """The conversation's rows."""
        return [r for r in self._rows.values() if r.conversation_id == conversation_id]

    async def set_cost_ceiling(
        self, execution_id: str, cost_ceiling_usd: Decimal | None
    ) -> ExecutionUsage:
        """Change the ceiling."""
        async with self._lock:
            row = self._get(execution_id).model_copy(
                update={"cost_ceiling_usd": cost_ceiling_usd, "updated_at": datetime.now(UTC)}
            )
            self._rows[execution_id] = row
            return row

    async def set_execution_status(
        self, execution_id: str, status: ExecutionStatus, reason: str = ""
    ) -> ExecutionUsage:
        """Finish or kill; a killed execution stays killed."""
        async with self._lock:
            row = self._get(execution_id)
            if row.status != ExecutionStatus.KILLED:
                row = row.model_copy(
                    update={
                        "status": status,
                        "status_reason": reason,
                        "updated_at": datetime.now(UTC),
                    }
                )
                self._rows[execution_id] = row
            return row

    async def overreporting_providers(self) -> dict[str, int]:
        """Providers whose over-report killed runs here, with how many."""
        found: dict[str, int] = {}
        for row in self._rows.values():
            if row.status == ExecutionStatus.KILLED and row.status_reason.startswith(
                f"{OVERREPORT}:"
            ):
                found[row.provider] = found.get(row.provider, 0) + 1
        return dict(sorted(found.items()))

    async def tree_budget(self, conversation_id: str) -> TreeBudget | None:
        """No conversations here, so no delegation trees: every execution stands alone."""
        return None

    def _get(self, execution_id: str) -> ExecutionUsage:
        try:
            return self._rows[execution_id]
        except KeyError:
            raise NotFoundError(f"execution {execution_id!r} is not in the ledger") from None
