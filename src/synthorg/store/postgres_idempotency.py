"""Idempotency keys on PostgreSQL: one row per (caller, route, key), forgotten after its TTL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from synthorg.store.protocol import IdempotencyRecord, IdempotencySlot


def _at(slot: IdempotencySlot) -> tuple[str, str, str]:
    return (slot.caller, slot.route, slot.key)


class PostgresIdempotencyKeys:
    """Idempotency keys on PostgreSQL (mixed into PostgresStore)."""

    _conn: Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]
    _all: Callable[..., Awaitable[list[tuple[Any, ...]]]]  # PostgresStore's query helpers

    async def claim_idempotency_key(
        self, slot: IdempotencySlot, fingerprint: str, *, ttl_s: float
    ) -> IdempotencyRecord | None:
        while True:
            async with self._conn() as conn, conn.transaction():
                await conn.execute("DELETE FROM idempotency_keys WHERE expires_at <= now()")
                # ON CONFLICT waits for a concurrent claim of the same slot to commit.
                cur = await conn.execute(
                    "INSERT INTO idempotency_keys (caller, route, key, fingerprint, created_at,"
                    " expires_at) VALUES (%s, %s, %s, %s, now(),"
                    " now() + make_interval(secs => %s)) ON CONFLICT DO NOTHING RETURNING 1",
                    (*_at(slot), fingerprint, ttl_s),
                )
                if await cur.fetchone() is not None:
                    return None
                cur = await conn.execute(
                    "SELECT fingerprint, status, body FROM idempotency_keys"
                    " WHERE caller = %s AND route = %s AND key = %s",
                    _at(slot),
                )
                row = await cur.fetchone()
            if row is not None:  # else released between the two statements: claim again
                return IdempotencyRecord(fingerprint=row[0], status=row[1], body=row[2])

    async def complete_idempotency_key(self, slot: IdempotencySlot, status: int, body: Any) -> None:
        await self._all(
            "UPDATE idempotency_keys SET status = %s, body = %s"
            " WHERE caller = %s AND route = %s AND key = %s RETURNING 1",
            (status, Jsonb(body), *_at(slot)),
        )

    async def release_idempotency_key(self, slot: IdempotencySlot) -> None:
        await self._all(
            "DELETE FROM idempotency_keys"
            " WHERE caller = %s AND route = %s AND key = %s RETURNING 1",
            _at(slot),
        )
