"""The event log on PostgreSQL: append (fenced or not), a status transition, history.

An append is one statement (see ``_APPEND``): it bumps the conversation's ``last_seq`` under
the row lock, which orders concurrent appends of one conversation, and inserts the event.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

from synthorg.domain import ConversationEvent, ConversationRecord, StatusChangeEvent, StoredEvent
from synthorg.errors import NotFoundError
from synthorg.store import codec
from synthorg.store.errors import LeaseLostError
from synthorg.store.fence import RUN_FENCE, lost
from synthorg.store.postgres_conversations import PostgresConversations

_DECODE_IN_THREAD = 500

# A turn (an event with usage) moves the record's totals in the same statement; numeric
# arithmetic, so the cost stays exact.
_ADD_TURN = """CASE WHEN %(turn)s THEN jsonb_set(jsonb_set(state, '{usage}', jsonb_build_object(
        'tokens_in', (state #>> '{usage,tokens_in}')::bigint + %(tin)s,
        'tokens_out', (state #>> '{usage,tokens_out}')::bigint + %(tout)s,
        'cost_usd', ((state #>> '{usage,cost_usd}')::numeric + %(cost)s::numeric)::text)),
        '{turns}', to_jsonb((state ->> 'turns')::bigint + 1)) ELSE state END"""

_APPEND = (
    """
WITH bumped AS (
    UPDATE conversations SET last_seq = last_seq + 1, state = """  # noqa: S608 (a literal)
    + _ADD_TURN
    + """
    WHERE id = %(cid)s RETURNING id, last_seq
), inserted AS (
    INSERT INTO events (conversation_id, seq, ts, kind, body)
    SELECT id, last_seq, clock_timestamp(), %(kind)s, %(body)s::jsonb FROM bumped
    RETURNING seq, ts
)
SELECT seq, ts FROM inserted
"""
)

# The same, only while the writer still owns the conversation (the run fence).
_APPEND_FENCED = (
    """
WITH bumped AS (
    UPDATE conversations SET last_seq = last_seq + 1, state = """  # noqa: S608 (a literal)
    + _ADD_TURN
    + """
    WHERE id = %(cid)s AND EXISTS (
        SELECT 1 FROM conversation_owners WHERE conversation_id = %(cid)s AND owner_id = %(oid)s
    )
    RETURNING id, last_seq
), inserted AS (
    INSERT INTO events (conversation_id, seq, ts, kind, body)
    SELECT id, last_seq, clock_timestamp(), %(kind)s, %(body)s::jsonb FROM bumped
    RETURNING seq, ts
)
SELECT seq, ts FROM inserted
"""
)


def _append_params(conversation_id: str, event: ConversationEvent) -> dict[str, Any]:
    """The parameters of _APPEND / _APPEND_FENCED for ``event``."""
    usage = event.usage
    return {
        "cid": conversation_id,
        "kind": event.kind,
        "body": codec.event_json(event),
        "turn": usage is not None,
        "tin": usage.tokens_in if usage else 0,
        "tout": usage.tokens_out if usage else 0,
        "cost": str(usage.cost_usd) if usage else "0",
    }


_FENCE = "SELECT 1 FROM conversation_owners WHERE conversation_id = %s AND owner_id = %s FOR SHARE"


class PostgresEvents(PostgresConversations):
    """The ``events`` table (mixed into PostgresStore)."""

    async def transition(self, record: ConversationRecord, event: StatusChangeEvent) -> StoredEvent:
        codec.check_transition(record, event)
        params = _append_params(record.id, event)
        owner = RUN_FENCE.get()
        async with self._conn() as conn, conn.transaction():
            if owner is not None:  # held (FOR SHARE) until commit: no takeover in between
                fence = await conn.execute(_FENCE, (record.id, owner))
                if await fence.fetchone() is None:
                    raise LeaseLostError(lost(record.id, owner))
            await self._save(conn, record)
            cur = await conn.execute(_APPEND, params)
            row = await cur.fetchone()
        assert row is not None  # the save above proved the conversation exists
        self._changed(record.id, appended=True)
        return StoredEvent(
            conversation_id=record.id, seq=row[0], timestamp=codec.utc(row[1]), event=event
        )

    async def append(self, conversation_id: str, event: ConversationEvent) -> StoredEvent:
        params = _append_params(conversation_id, event)
        owner = RUN_FENCE.get()
        if owner is None:
            write = self._all(_APPEND, params)
        else:
            write = self._all(_APPEND_FENCED, {**params, "oid": owner})
        # An INSERT sent may commit even if its caller is cancelled meanwhile: finish it before
        # unwinding, so what the cancellation reaches next (the runner answering a cut-off
        # run's open actions) reads it (as SqliteWriter.submit does).
        task = asyncio.ensure_future(write)
        try:
            rows = await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
            raise
        if not rows:
            if owner is not None:
                await self.get_conversation(conversation_id)  # NotFoundError if it is gone
                raise LeaseLostError(lost(conversation_id, owner))
            raise NotFoundError(f"no conversation {conversation_id}")
        # Committed (autocommit): wake local followers now, other processes' soon; a turn
        # changed the record's totals too, which a listing shows.
        if event.usage is not None:
            self._changed(conversation_id, appended=True)
        else:
            self._hub.notify(conversation_id)
            self._notifier.notify(conversation_id)
        seq, moment = rows[0]
        return StoredEvent(
            conversation_id=conversation_id, seq=seq, timestamp=codec.utc(moment), event=event
        )

    async def history(
        self,
        conversation_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        since: datetime | None = None,
        kinds: frozenset[str] | None = None,
        limit: int = 100,
    ) -> list[StoredEvent]:
        """Events in seq order. With ``before`` and no ``after``, the page just before it."""
        query = codec.history_query(
            conversation_id,
            after=after,
            before=before,
            since=since,
            kinds=kinds,
            limit=limit,
            dialect="postgres",
        )
        rows = await self._all(query.sql, query.params)
        if query.backwards:
            rows.reverse()
        if len(rows) < _DECODE_IN_THREAD:
            return codec.stored_events(conversation_id, rows)
        # A long page is decoded off the event loop so that it keeps serving others.
        return await asyncio.to_thread(codec.stored_events, conversation_id, rows)

    async def _exists(self, conversation_id: str) -> bool:
        rows = await self._all("SELECT 1 FROM conversations WHERE id = %s", (conversation_id,))
        return bool(rows)

    async def last_seq(self, conversation_id: str) -> int:
        rows = await self._all(
            "SELECT last_seq FROM conversations WHERE id = %s", (conversation_id,)
        )
        if not rows:
            raise NotFoundError(f"no conversation {conversation_id}")
        return int(rows[0][0])
