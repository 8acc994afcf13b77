"""Forge deliveries on SQLite: one row per delivery id, queued then settled."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from synthorg.store import codec, forge_codec
from synthorg.store.protocol import DeliveryRecord, DeliveryState, ForgePull
from synthorg.store.sqlite_engine import SqliteReaders, SqliteWriter

_COLUMNS = forge_codec.DELIVERY_COLUMNS


def _record(row: tuple[Any, ...]) -> DeliveryRecord:
    return forge_codec.delivery(row, payload=json.loads, ts=codec.parse_ts)


class SqliteForgeDeliveries:
    """Forge deliveries on SQLite (mixed into SqliteStore)."""

    _writer: SqliteWriter
    _readers: SqliteReaders

    async def record_delivery(self, record: DeliveryRecord) -> bool:
        values = forge_codec.delivery_values(record, payload=json.dumps, ts=codec.ts_text)

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

    async def conversation_deliveries(self, conversation_id: str) -> list[DeliveryRecord]:
        def work(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_COLUMNS} FROM forge_deliveries WHERE conversation_id = ?"  # noqa: S608 (constant columns)
                " ORDER BY received_at, delivery_id",
                (conversation_id,),
            ).fetchall()

        return [_record(row) for row in await self._readers.run(work)]

    async def record_pull(
        self, conversation_id: str, project_id: str, number: int, html_url: str
    ) -> None:
        values = (conversation_id, project_id, number, html_url, codec.ts_text(codec.now()))

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO forge_pulls ({forge_codec.PULL_COLUMNS})"  # noqa: S608 (constant columns)
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET"
                " number = excluded.number, html_url = excluded.html_url,"
                " updated_at = excluded.updated_at",
                values,
            )

        await self._writer.submit(work)

    async def conversation_pull(self, conversation_id: str) -> ForgePull | None:
        def work(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                f"SELECT {forge_codec.PULL_COLUMNS} FROM forge_pulls"  # noqa: S608 (constant columns)
                " WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            return row

        row = await self._readers.run(work)
        return None if row is None else forge_codec.pull(row, ts=codec.parse_ts)
