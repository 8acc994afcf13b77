"""Conversation records on PostgreSQL: create, read, save, list, count, delete (a tree)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from synthorg.domain import ConversationRecord, ConversationStatus
from synthorg.errors import ConflictError, NotFoundError
from synthorg.store import codec
from synthorg.store.postgres_engine import PostgresEngine
from synthorg.store.protocol import ConversationPage
from synthorg.store.tree_budget import DELETE_TREE_SQL


class PostgresConversations(PostgresEngine):
    """The ``conversations`` table (mixed into PostgresStore)."""

    async def create_conversation(self, record: ConversationRecord) -> None:
        sql, values = codec.insert_conversation(
            record, codec.record_json(record, self._cipher), "postgres"
        )
        try:
            await self._all(f"{sql} RETURNING id", values)
        except pg_errors.UniqueViolation as exc:
            raise ConflictError(f"conversation {record.id} already exists") from exc
        self._changed(record.id)

    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        rows = await self._all(
            "SELECT state::text FROM conversations WHERE id = %s", (conversation_id,)
        )
        if not rows:
            raise NotFoundError(f"no conversation {conversation_id}")
        return codec.record_from_json(rows[0][0], self._cipher)

    async def _save(self, conn: psycopg.AsyncConnection[Any], record: ConversationRecord) -> None:
        previous = None
        if codec.needs_previous(record):
            cur = await conn.execute(
                "SELECT state::text FROM conversations WHERE id = %s FOR UPDATE", (record.id,)
            )
            row = await cur.fetchone()
            previous = row[0] if row else None
        cur = await conn.execute(
            "UPDATE conversations SET project_id = %s, status = %s, state = %s::jsonb,"
            " updated_at = %s, parent_id = %s, root_id = %s WHERE id = %s RETURNING id",
            (
                record.task.project_id,
                record.status.value,
                codec.record_json(record, self._cipher, previous),
                codec.utc(record.updated_at),
                record.parent_id,
                record.root_id,
                record.id,
            ),
        )
        if await cur.fetchone() is None:
            raise NotFoundError(f"no conversation {record.id}")

    async def save_conversation(self, record: ConversationRecord) -> None:
        async with self._conn() as conn, conn.transaction():
            await self._save(conn, record)
        self._changed(record.id)

    async def list_conversations(
        self,
        *,
        status: ConversationStatus | None = None,
        project_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        search: str | None = None,
        forge_events: Sequence[str] = (),
    ) -> ConversationPage:
        sql, params = codec.listing_query(
            status,
            project_id,
            cursor=cursor,
            limit=limit,
            search=search,
            dialect="postgres",
            forge_events=forge_events,
        )
        return codec.conversation_page(await self._all(sql, params), limit, self._cipher)

    async def list_children(self, parent_id: str) -> list[ConversationRecord]:
        rows = await self._all(
            "SELECT state::text FROM conversations WHERE parent_id = %s ORDER BY created_at, id",
            (parent_id,),
        )
        return [codec.record_from_json(r[0], self._cipher) for r in rows]

    async def count_conversations(
        self,
        *,
        status: ConversationStatus | None = None,
        project_id: str | None = None,
        search: str | None = None,
        forge_events: Sequence[str] = (),
    ) -> int:
        where, params = codec.filters(
            status, project_id, mark="%s", true="TRUE", search=search, forge_events=forge_events
        )
        rows = await self._all(f"SELECT COUNT(*) FROM conversations WHERE {where}", params)  # noqa: S608
        return int(rows[0][0])

    async def delete_conversation(self, conversation_id: str) -> None:
        async with self._conn() as conn, conn.transaction():
            # The tree goes with its root; events go by the foreign key's cascade. The ledger
            # rows stay: money spent is never forgotten (see TREE_MEMBERS_SQL).
            cur = await conn.execute(
                DELETE_TREE_SQL.format(mark="%s") + " RETURNING id", (conversation_id,) * 2
            )
            ids = [row[0] for row in await cur.fetchall()]
        if conversation_id not in ids:
            raise NotFoundError(f"no conversation {conversation_id}")
        for cid in ids:
            self._changed(cid, appended=True)  # its followers learn it is gone
