"""Idempotency keys on SQLite: one row per (caller, route, key), forgotten after its TTL."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from typing import Any

from synthorg.store import codec
from synthorg.store.protocol import IdempotencyRecord, IdempotencySlot
from synthorg.store.sqlite_engine import SqliteWriter


def _at(slot: IdempotencySlot) -> tuple[str, str, str]:
    return (slot.caller, slot.route, slot.key)


class SqliteIdempotencyKeys:
    """Idempotency keys on SQLite (mixed into SqliteStore; kept apart from the event log)."""

    _writer: SqliteWriter

    async def claim_idempotency_key(
        self, slot: IdempotencySlot, fingerprint: str, *, ttl_s: float
    ) -> IdempotencyRecord | None:
        now = codec.now()
        stamp, expires = codec.ts_text(now), codec.ts_text(now + timedelta(seconds=ttl_s))

        # One writer job is one transaction: the check and the claim cannot interleave.
        def work(conn: sqlite3.Connection) -> IdempotencyRecord | None:
            conn.execute("DELETE FROM idempotency_keys WHERE expires_at <= ?", (stamp,))
            row = conn.execute(
                "SELECT fingerprint, status, body FROM idempotency_keys"
                " WHERE caller = ? AND route = ? AND key = ?",
                _at(slot),
            ).fetchone()
            if row is not None:
                body = None if row[2] is None else json.loads(row[2])
                return IdempotencyRecord(fingerprint=row[0], status=row[1], body=body)
            conn.execute(
                "INSERT INTO idempotency_keys (caller, route, key, fingerprint, created_at,"
                " expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                (*_at(slot), fingerprint, stamp, expires),
            )
            return None

        return await self._writer.submit(work)

    async def complete_idempotency_key(self, slot: IdempotencySlot, status: int, body: Any) -> None:
        text = json.dumps(body)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE idempotency_keys SET status = ?, body = ?"
                " WHERE caller = ? AND route = ? AND key = ?",
                (status, text, *_at(slot)),
            )

        await self._writer.submit(work)

    async def release_idempotency_key(self, slot: IdempotencySlot) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM idempotency_keys WHERE caller = ? AND route = ? AND key = ?", _at(slot)
            )

        await self._writer.submit(work)
