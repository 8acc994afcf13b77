"""Evaluation items on PostgreSQL: one JSON document per (eval id, key), upserted."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg.types.json import Jsonb


class PostgresEvalItems:
    """Eval items on PostgreSQL (mixed into PostgresStore; kept apart from the event log)."""

    _all: Callable[..., Awaitable[list[tuple[Any, ...]]]]  # PostgresStore's query helper

    async def put_eval_item(self, eval_id: str, key: str, body: dict[str, Any]) -> None:
        await self._all(
            "INSERT INTO eval_items (eval_id, key, body, updated_at) VALUES (%s, %s, %s, now())"
            " ON CONFLICT (eval_id, key) DO UPDATE SET body = excluded.body,"
            " updated_at = excluded.updated_at RETURNING key",
            (eval_id, key, Jsonb(json.loads(json.dumps(body, default=str)))),
        )

    async def eval_items(self, eval_id: str, prefix: str = "") -> dict[str, dict[str, Any]]:
        rows = await self._all(
            "SELECT key, body FROM eval_items WHERE eval_id = %s AND left(key, %s) = %s"
            " ORDER BY key",
            (eval_id, len(prefix), prefix),
        )
        return {key: body for key, body in rows}

    async def eval_ids(self) -> list[str]:
        rows = await self._all(
            "SELECT eval_id FROM eval_items GROUP BY eval_id ORDER BY min(updated_at) DESC"
        )
        return [row[0] for row in rows]
