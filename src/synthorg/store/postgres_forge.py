"""Forge deliveries on PostgreSQL: one row per delivery id, queued then settled."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg.types.json import Jsonb

from synthorg.store import codec, forge_codec
from synthorg.store.protocol import DeliveryRecord, DeliveryState, ForgePull

_COLUMNS = forge_codec.DELIVERY_COLUMNS


def _record(row: tuple[Any, ...]) -> DeliveryRecord:
    return forge_codec.delivery(row, payload=dict, ts=codec.utc)


class PostgresForgeDeliveries:
    """Forge deliveries on PostgreSQL (mixed into PostgresStore)."""

    _all: Callable[..., Awaitable[list[tuple[Any, ...]]]]  # PostgresStore's query helper

    async def record_delivery(self, record: DeliveryRecord) -> bool:
        rows = await self._all(
            f"INSERT INTO forge_deliveries ({_COLUMNS})"  # noqa: S608 (constant columns)
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (delivery_id) DO NOTHING RETURNING 1",
            forge_codec.delivery_values(record, payload=Jsonb, ts=codec.utc),
        )
        return bool(rows)

    async def queued_deliveries(self, limit: int) -> list[DeliveryRecord]:
        rows = await self._all(
            f"SELECT {_COLUMNS} FROM forge_deliveries WHERE state = %s"  # noqa: S608 (constant columns)
            " ORDER BY received_at, delivery_id LIMIT %s",
            (DeliveryState.QUEUED.value, limit),
        )
        return [_record(row) for row in rows]

    async def settle_delivery(
        self,
        delivery_id: str,
        state: DeliveryState,
        outcome: str,
        *,
        conversation_id: str | None = None,
    ) -> None:
        await self._all(
            "UPDATE forge_deliveries SET state = %s, outcome = %s,"
            " conversation_id = coalesce(%s, conversation_id), updated_at = now()"
            " WHERE delivery_id = %s RETURNING 1",
            (state.value, outcome, conversation_id, delivery_id),
        )

    async def recent_deliveries(
        self, limit: int, *, project_id: str | None = None
    ) -> list[DeliveryRecord]:
        rows = await self._all(
            f"SELECT {_COLUMNS} FROM forge_deliveries"  # noqa: S608 (constant columns)
            " WHERE %s::text IS NULL OR project_id = %s"
            " ORDER BY received_at DESC, delivery_id DESC LIMIT %s",
            (project_id, project_id, limit),
        )
        return [_record(row) for row in rows]

    async def issue_conversation(self, project_id: str, issue: int) -> str | None:
        rows = await self._all(
            "SELECT conversation_id FROM forge_deliveries WHERE project_id = %s AND issue = %s"
            " AND conversation_id IS NOT NULL ORDER BY received_at DESC LIMIT 1",
            (project_id, issue),
        )
        return None if not rows else str(rows[0][0])

    async def conversation_deliveries(self, conversation_id: str) -> list[DeliveryRecord]:
        rows = await self._all(
            f"SELECT {_COLUMNS} FROM forge_deliveries WHERE conversation_id = %s"  # noqa: S608 (constant columns)
            " ORDER BY received_at, delivery_id",
            (conversation_id,),
        )
        return [_record(row) for row in rows]

    async def record_pull(
        self, conversation_id: str, project_id: str, number: int, html_url: str
    ) -> None:
        await self._all(
            f"INSERT INTO forge_pulls ({forge_codec.PULL_COLUMNS})"  # noqa: S608 (constant columns)
            " VALUES (%s, %s, %s, %s, now()) ON CONFLICT (conversation_id) DO UPDATE SET"
            " number = excluded.number, html_url = excluded.html_url,"
            " updated_at = excluded.updated_at RETURNING 1",
            (conversation_id, project_id, number, html_url),
        )

    async def conversation_pull(self, conversation_id: str) -> ForgePull | None:
        rows = await self._all(
            f"SELECT {forge_codec.PULL_COLUMNS} FROM forge_pulls"  # noqa: S608 (constant columns)
            " WHERE conversation_id = %s",
            (conversation_id,),
        )
        return forge_codec.pull(rows[0], ts=codec.utc) if rows else None
