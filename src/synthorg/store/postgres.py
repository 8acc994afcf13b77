"""The PostgreSQL backend of the store (psycopg 3, async pool), for several processes or hosts.

An append is one statement, so one round trip and one transaction: it bumps the
conversation's ``last_seq`` (the row lock orders concurrent appends of one conversation) and
inserts the event with that seq. After the commit the store wakes its own followers and
queues a NOTIFY for other processes (sent outside the append transaction; see ``Notifier``
for why). Each store keeps one LISTEN connection. A notification only wakes followers, who
then read ``seq > last delivered`` from the table (see ``tail.py``), so lost, duplicated or
reordered notifications cannot cause gaps or duplicates; followers also re-read every
``poll_interval`` seconds in case a notification was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from synthorg.domain import (
    ConversationEvent,
    ConversationRecord,
    ConversationStatus,
    StatusChangeEvent,
    StoredEvent,
)
from synthorg.errors import ConflictError, NotFoundError
from synthorg.store import codec
from synthorg.store.config import PgTimeouts, describe
from synthorg.store.errors import (
    RESUME_HINT,
    ConversationOwnedError,
    LeaseLostError,
    StoreUnavailableError,
)
from synthorg.store.fence import RUN_FENCE, lost
from synthorg.store.pg_listen import RECORD_CHANGED, Listener, Notifier
from synthorg.store.postgres_budget import PostgresBudget
from synthorg.store.postgres_eval import PostgresEvalItems
from synthorg.store.postgres_forge import PostgresForgeDeliveries
from synthorg.store.postgres_idempotency import PostgresIdempotencyKeys
from synthorg.store.protocol import (
    ConversationPage,
    ExecutionStatus,
    ExecutionUsage,
    ReconcileReport,
    RunClaimant,
    RunOwner,
    TreeBudget,
)
from synthorg.store.reconcile import reconcile
from synthorg.store.schema import IDENTIFY, IDENTITY, VERSION_TABLE, pending, render
from synthorg.store.secrets import SecretCipher
from synthorg.store.tail import LiveTail, TailHub
from synthorg.store.tree_budget import DELETE_TREE_SQL, TREE_COSTS_SQL, read_tree_budget

_DECODE_IN_THREAD = 500
_MIGRATION_LOCK = 0x5F0A_5107  # advisory lock key: one migrator at a time per database

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

_OWNER_COLUMNS = (
    "owner_id, host, pid, since, heartbeat_at, expires_at, expires_at < clock_timestamp()"
)

# Atomic on the row lock: of concurrent claimants exactly one sees the WHERE hold.
_CLAIM = """
INSERT INTO conversation_owners AS o
    (conversation_id, owner_id, host, pid, since, heartbeat_at, expires_at)
VALUES (%(cid)s, %(oid)s, %(host)s, %(pid)s, clock_timestamp(), clock_timestamp(),
        clock_timestamp() + make_interval(secs => %(lease)s))
ON CONFLICT (conversation_id) DO UPDATE SET
    owner_id = excluded.owner_id, host = excluded.host, pid = excluded.pid,
    since = CASE WHEN o.owner_id = excluded.owner_id THEN o.since ELSE excluded.since END,
    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at
WHERE o.expires_at < clock_timestamp() OR o.owner_id = excluded.owner_id
    OR o.owner_id = %(displace)s
RETURNING owner_id, host, pid, since, heartbeat_at, expires_at, FALSE
"""

_RENEW = """
WITH owner AS (
    UPDATE conversation_owners SET heartbeat_at = clock_timestamp(),
        expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
    WHERE conversation_id = %(cid)s AND owner_id = %(oid)s RETURNING expires_at
), runs AS (
    UPDATE executions SET lease_expires_at = owner.expires_at FROM owner
    WHERE executions.conversation_id = %(cid)s AND executions.status = 'active'
        AND executions.lease_expires_at IS NOT NULL
)
SELECT 1 FROM owner
"""
"""Renew the owner's lease and its run's execution's in one statement (take_over killed any
earlier execution of the conversation, so only this owner's run is extended)."""


class PostgresStore(
    PostgresBudget,
    PostgresEvalItems,
    PostgresIdempotencyKeys,
    PostgresForgeDeliveries,
    LiveTail,
):
    """Conversations, the event log and the ledger in a PostgreSQL database."""

    def __init__(
        self,
        url: str,
        *,
        cipher: SecretCipher | None = None,
        poll_interval: float = 1.0,
        max_size: int = 10,
        timeouts: PgTimeouts | None = None,
    ) -> None:
        self.url = url
        self._ledger_id = ""
        self._cipher = cipher
        self._poll_interval = poll_interval
        self._hub = TailHub()
        self._timeouts = timeouts = timeouts or PgTimeouts()
        statement_ms = int(timeouts.statement_s * 1000)

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            # Server side: no statement (lock waits included) runs longer than this.
            await conn.execute(f"SET statement_timeout = {statement_ms}")

        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": timeouts.connect_whole_s},
            configure=configure,
            timeout=timeouts.pool_s,
            reconnect_timeout=0,  # keep retrying in the background; callers are bounded
            open=False,
        )
        self._listener = Listener(url, self._hub, connect_timeout_s=timeouts.connect_s)
        self._notifier = Notifier(url, connect_timeout_s=timeouts.connect_s)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        cipher: SecretCipher | None = None,
        poll_interval: float = 1.0,
        max_size: int = 10,
        timeouts: PgTimeouts | None = None,
    ) -> PostgresStore:
        """Connect, apply pending migrations, start listening for other processes' appends."""
        bounds = timeouts or PgTimeouts()
        try:
            # One plain connection first: an unreachable server fails fast and clearly
            # instead of after the pool's retry loop.
            async with asyncio.timeout(bounds.connect_s):
                probe = await psycopg.AsyncConnection.connect(
                    url, connect_timeout=bounds.connect_whole_s
                )
                await probe.close()
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreUnavailableError(
                f"cannot connect to the PostgreSQL store at {describe(url)} within "
                f"{bounds.connect_s:g} s: is the server running and the database created? "
                f"({exc or 'no answer'})"
            ) from exc
        store = cls(
            url, cipher=cipher, poll_interval=poll_interval, max_size=max_size, timeouts=bounds
        )
        try:
            await store._pool.open(wait=True, timeout=bounds.pool_s)
        except PoolTimeout as exc:
            await store._pool.close()
            raise StoreUnavailableError(
                f"the PostgreSQL store at {describe(url)} gave no connection within "
                f"{bounds.pool_s:g} s; {RESUME_HINT}"
            ) from exc
        try:
            await store.migrate()
            await store._listener.start()
            store._notifier.start()
        except BaseException:
            await store.close()
            raise
        return store

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        # Client side too: a stalled server or network (no answer at all) is bounded here,
        # since statement_timeout only helps when the server can still answer.
        bound = self._timeouts.call_s
        try:
            async with asyncio.timeout(bound), self._pool.connection() as conn:
                yield conn
        except pg_errors.IntegrityError:
            raise  # the callers turn these into ConflictError / NotFoundError
        except pg_errors.QueryCanceled as exc:
            raise self._unavailable(
                f"a statement ran past {self._timeouts.statement_s:g} s"
            ) from exc
        except TimeoutError as exc:
            raise self._unavailable(f"no answer within {bound:g} s (stalled?)") from exc
        except PoolTimeout as exc:
            raise self._unavailable(
                f"no connection within {self._timeouts.pool_s:g} s (down or unreachable?)"
            ) from exc
        except psycopg.Error as exc:
            raise self._unavailable(str(exc).strip() or type(exc).__name__) from exc

    def _unavailable(self, what: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"the PostgreSQL store at {describe(self.url)} failed: {what}; check the server "
            f"and the network to it; {RESUME_HINT}"
        )

    async def _one(self, sql: str, params: Any = None) -> dict[str, Any] | None:
        async with self._conn() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchone()

    async def _all(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        async with self._conn() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

    async def migrate(self) -> int:
        """Apply pending migrations; returns how many were applied (0 when up to date)."""
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute(render(VERSION_TABLE, "postgres"))
            cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            row = await cur.fetchone()
            todo = pending(int(row[0]) if row else 0)
            for migration in todo:
                for statement in migration.statements:
                    await conn.execute(render(statement, "postgres"))
                await conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (%s, now())",
                    (migration.version,),
                )
            await conn.execute(IDENTIFY.format(mark="%s"), (secrets.token_hex(16), codec.now()))
            cur = await conn.execute(IDENTITY)
            named = await cur.fetchone()
            assert named is not None  # made just above if it was not there
            self._ledger_id = str(named[0])
        return len(todo)

    @property
    def ledger_id(self) -> str:
        """This store's own random id (see ``LedgerStore.ledger_id``)."""
        return self._ledger_id

    async def schema_version(self) -> int:
        """The schema version of the database."""
        rows = await self._all("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0])

    # -- conversations ---------------------------------------------------------------------

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

    def _changed(self, conversation_id: str, *, appended: bool = False) -> None:
        """The record changed (and an event was appended, when ``appended``): tell this
        process's watchers (and followers), then the other processes'."""
        self._hub.changed(conversation_id)
        self._notifier.notify(RECORD_CHANGED + conversation_id)
        if appended:
            self._hub.notify(conversation_id)
            self._notifier.notify(conversation_id)

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

    # -- ownership -------------------------------------------------------------------------

    async def claim_conversation(
        self,
        conversation_id: str,
        claimant: RunClaimant,
        *,
        lease_s: float,
        displace: str | None = None,
    ) -> RunOwner:
        params = {
            "cid": conversation_id,
            "oid": claimant.owner_id,
            "host": claimant.host,
            "pid": claimant.pid,
            "lease": lease_s,
            "displace": displace,
        }
        for _ in range(3):  # the holder may release between our claim and our read
            try:
                rows = await self._all(_CLAIM, params)
            except pg_errors.ForeignKeyViolation as exc:
                raise NotFoundError(f"no conversation {conversation_id}") from exc
            if rows:
                return codec.owner(rows[0], ts=codec.utc, expired=bool(rows[0][6]))
            holder = await self.conversation_owner(conversation_id)
            if holder is not None:
                raise ConversationOwnedError(conversation_id, holder)
        raise ConflictError(f"conversation {conversation_id}: ownership changing; retry")

    async def renew_claim(self, conversation_id: str, owner_id: str, *, lease_s: float) -> bool:
        rows = await self._all(_RENEW, {"cid": conversation_id, "oid": owner_id, "lease": lease_s})
        return bool(rows)

    async def release_conversation(self, conversation_id: str, owner_id: str) -> None:
        await self._all(
            "DELETE FROM conversation_owners WHERE conversation_id = %s AND owner_id = %s"
            " RETURNING 1",
            (conversation_id, owner_id),
        )

    async def conversation_owner(self, conversation_id: str) -> RunOwner | None:
        rows = await self._all(
            f"SELECT {_OWNER_COLUMNS} FROM conversation_owners"  # noqa: S608
            " WHERE conversation_id = %s",
            (conversation_id,),
        )
        return codec.owner(rows[0], ts=codec.utc, expired=bool(rows[0][6])) if rows else None

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

    # -- event log -------------------------------------------------------------------------

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

    async def reconcile_after_restart(self) -> ReconcileReport:
        return await reconcile(self)

    async def close(self) -> None:
        await self._notifier.stop()
        await self._listener.stop()
        await self._pool.close()

    # -- ledger ----------------------------------------------------------------------------

    async def open_execution(
        self,
        *,
        execution_id: str,
        conversation_id: str,
        model: str,
        provider: str,
        cost_ceiling_usd: Decimal | None,
    ) -> ExecutionUsage:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO executions (execution_id, conversation_id, model, provider,"
                " cost_ceiling_usd, cost_usd, status, created_at, updated_at, lease_expires_at)"
                " VALUES (%s, %s, %s, %s, %s, 0, %s, now(), now(), (SELECT expires_at FROM"
                " conversation_owners WHERE conversation_id = %s))"
                " ON CONFLICT (execution_id) DO NOTHING",
                (
                    execution_id,
                    conversation_id,
                    model,
                    provider,
                    cost_ceiling_usd,
                    ExecutionStatus.ACTIVE.value,
                    conversation_id,
                ),
            )
        return await self.get_execution(execution_id)

    async def record_usage(
        self, execution_id: str, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        # One statement: concurrent recorders in any process never lose an add.
        row = await self._one(
            "UPDATE executions SET requests = requests + 1, tokens_in = tokens_in + %s,"
            " tokens_out = tokens_out + %s, cost_usd = cost_usd + %s, updated_at = now()"
            " WHERE execution_id = %s RETURNING *",
            (tokens_in, tokens_out, cost_usd, execution_id),
        )
        if row is None:
            raise NotFoundError(f"no execution {execution_id} in the ledger")
        return codec.execution_from_row(row)

    async def get_execution(self, execution_id: str) -> ExecutionUsage:
        row = await self._one("SELECT * FROM executions WHERE execution_id = %s", (execution_id,))
        if row is None:
            raise NotFoundError(f"no execution {execution_id} in the ledger")
        return codec.execution_from_row(row)

    async def executions_of(self, conversation_id: str) -> list[ExecutionUsage]:
        async with self._conn() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT * FROM executions WHERE conversation_id = %s ORDER BY created_at",
                (conversation_id,),
            )
            return [codec.execution_from_row(row) for row in await cur.fetchall()]

    async def set_cost_ceiling(
        self, execution_id: str, cost_ceiling_usd: Decimal | None
    ) -> ExecutionUsage:
        await self._all(
            "UPDATE executions SET cost_ceiling_usd = %s, updated_at = now()"
            " WHERE execution_id = %s RETURNING execution_id",
            (cost_ceiling_usd, execution_id),
        )
        return await self.get_execution(execution_id)

    async def tree_budget(self, conversation_id: str) -> TreeBudget | None:
        sql = TREE_COSTS_SQL.format(mark="%s")

        async def costs(root_id: str) -> list[object]:
            return [row[0] for row in await self._all(sql, (root_id, root_id))]

        return await read_tree_budget(conversation_id, self.get_conversation, costs)

    async def set_execution_status(
        self, execution_id: str, status: ExecutionStatus, reason: str = ""
    ) -> ExecutionUsage:
        # Killed is final: the guard is in the statement so a racing update cannot revive it.
        await self._all(
            "UPDATE executions SET status = %s, status_reason = %s, updated_at = now()"
            " WHERE execution_id = %s AND status <> %s RETURNING execution_id",
            (status.value, reason, execution_id, ExecutionStatus.KILLED.value),
        )
        return await self.get_execution(execution_id)
