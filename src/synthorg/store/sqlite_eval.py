"""Evaluation items on SQLite: one JSON document per (eval id, key), upserted."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from synthorg.store import codec
from synthorg.store.sqlite_engine import SqliteReaders, SqliteWriter


class SqliteEvalItems:
    """Eval items on SQLite (mixed into SqliteStore below; kept apart from the event log)."""

    _writer: SqliteWriter
    _readers: SqliteReaders

    async def put_eval_item(self, eval_id: str, key: str, body: dict[str, Any]) -> None:
        text, stamp = json.dumps(body, default=str), codec.ts_text(codec.now())

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO eval_items (eval_id, key, body, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (eval_id, key) DO UPDATE SET body = excluded.body,"
                " updated_at = excluded.updated_at",
                (eval_id, key, text, stamp),
            )

        await self._writer.submit(work)

    async def eval_items(self, eval_id: str, prefix: str = "") -> dict[str, dict[str, Any]]:
        def work(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            return conn.execute(
                "SELECT key, body FROM eval_items WHERE eval_id = ? AND substr(key, 1, ?) = ?"
                " ORDER BY key",
                (eval_id, len(prefix), prefix),
            ).fetchall()

        return {key: json.loads(body) for key, body in await self._readers.run(work)}

    async def eval_ids(self) -> list[str]:
        def work(conn: sqlite3.Connection) -> list[tuple[str]]:
            return conn.execute(
                "SELECT eval_id FROM eval_items GROUP BY eval_id ORDER BY min(updated_at) DESC"
            ).fetchall()

        return [row[0] for row in await self._readers.run(work)]
