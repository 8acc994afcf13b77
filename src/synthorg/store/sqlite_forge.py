"""Forge deliveries on SQLite: one row per delivery id, queued then settled."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from synthorg.store import codec
from synthorg.store.protocol import DeliveryRecord, DeliveryState
from synthorg.store.sqlite_engine import SqliteReaders, SqliteWriter

_COLUMNS = (
    "delivery_id, project_id, event, state, outcome, issue, conversation_id, payload,"
    " received_at, updated_at"
)


def _record(row: tuple[Any, ...]) -> DeliveryRecord:
    return DeliveryRecord(
        delivery_id=row[0],
        project_id=row[1],
        event=row[2],
        state=DeliveryState(row[3]),
        outcome=row[4],
        issue=row[5],
        conversation_id=row[6],
        payload=json.loads(row[7]),
        received_at=codec.parse_ts(row[8]),
        updated_at=codec.parse_ts(row[9]),
    )


class SqliteForgeDeliveries:
    """Forge deliveries on SQLite (mixed into SqliteStore)."""

    _writer: SqliteWriter
    _readers: SqliteReaders

    async def record_delivery(self, record: DeliveryRecord) -> bool:
        values = (
            record.delivery_id,
            record.project_id,
            record.event,
            record.state.value,
            record.outcome,
            record.issue,
            record.conversation_id,
            json.dumps(record.payload),
            codec.ts_text(record.received_at),
            codec.ts_text(record.updated_at),
        )

        def work(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                f"INSERT INTO forge_deliveries ({_COLUMNS})"  # noqa: S608 (constant columns)
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (delivery_id) DO NOTHING",
                values,
            )
            return cur.rowcount == 1

        return await self._writer.submit(work)

    async def queued_deliveries(self, limit: int) -> list[DeliveryRecord]:
        def work(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_COLUMNS} FROM forge_deliveries WHERE state = ?"  # noqa: S608 (constant columns)
                " ORDER BY received_at, delivery_id LIMIT ?",
                (DeliveryState.QUEUED.value, limit),
            ).fetchall()

        return [_record(row) for row in await self._readers.run(work)]

    async def settle_delivery(
        self,
        delivery_id: str,
        state: DeliveryState,
        outcome: str,
        *,
        conversation_id: str | None = None,
    ) -> None:
        stamp = codec.ts_text(codec.now())

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE forge_deliveries SET state = ?, outcome = ?,"
                " conversation_id = coalesce(?, conversation_id), updated_at = ?"
                " WHERE delivery_id = ?",
                (state.value, outcome, conversation_id, stamp, delivery_id),
            )

        await self._writer.submit(work)

    async def recent_deliveries(
        self, limit: int, *, project_id: str | None = None
    ) -> list[DeliveryRecord]:
        def work(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_COLUMNS} FROM forge_deliveries WHERE ? IS NULL OR project_id = ?"  # noqa: S608 (constant columns)
                " ORDER BY received_at DESC, delivery_id DESC LIMIT ?",
                (project_id, project_id, limit),
            ).fetchall()

        return [_record(row) for row in await self._readers.run(work)]

    async def issue_conversation(self, project_id: str, issue: int) -> str | None:
        def work(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                "SELECT conversation_id FROM forge_deliveries WHERE project_id = ? AND issue = ?"
                " AND conversation_id IS NOT NULL ORDER BY received_at DESC LIMIT 1",
                (project_id, issue),
            ).fetchone()
            return row

        row = await self._readers.run(work)
        return None if row is None else str(row[0])
