"""The embedded SQLite backend of the store (the default, one file under SYNTHORG_HOME).

Live tail: followers in this process are woken right after each commit; followers in other
processes sharing the file re-read the log every ``poll_interval`` seconds (SQLite has no
cross-process notification), so their latency is at most that interval.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from synthorg.domain import (
    ConversationEvent,
    ConversationRecord,
    ConversationStatus,
    StatusChangeEvent,
    StoredEvent,
    TokenUsage,
)
from synthorg.errors import ConflictError, NotFoundError
from synthorg.store import codec
from synthorg.store.errors import ConversationOwnedError
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
from synthorg.store.sqlite_budget import SqliteBudget, execution_row
from synthorg.store.sqlite_engine import BUSY_TIMEOUT_S, SqliteReaders, SqliteWriter
from synthorg.store.sqlite_eval import SqliteEvalItems
from synthorg.store.sqlite_forge import SqliteForgeDeliveries
from synthorg.store.sqlite_idempotency import SqliteIdempotencyKeys
from synthorg.store.tail import LiveTail, TailHub
from synthorg.store.tree_budget import (
    DELETE_TREE_SQL,
    TREE_COSTS_SQL,
    TREE_MEMBERS_SQL,
    read_tree_budget,
)

_OWNER_COLUMNS = "owner_id, host, pid, since, heartbeat_at, expires_at"
_RENEW_EXECUTIONS = (
    "UPDATE executions SET lease_expires_at = ? WHERE conversation_id = ?"
    " AND status = 'active' AND lease_expires_at IS NOT NULL"
)
"""The owner's renewal extends its run's execution (take_over killed any earlier one)."""


def _migrate(conn: sqlite3.Connection) -> int:
    conn.execute(render(VERSION_TABLE, "sqlite"))
    current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
    applied = 0
    for migration in pending(current):
        for statement in migration.statements:
            conn.execute(render(statement, "sqlite"))
        conn.execute(
            "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
            (migration.version, codec.ts_text(codec.now())),
        )
        applied += 1
    conn.execute(IDENTIFY.format(mark="?"), (secrets.token_hex(16), codec.ts_text(codec.now())))
    return applied


class SqliteStore(
    SqliteBudget, SqliteEvalItems, SqliteIdempotencyKeys, SqliteForgeDeliveries, LiveTail
):
    """Conversations, the event log and the ledger in one SQLite file."""

    def __init__(
        self,
        path: Path,
        *,
        cipher: SecretCipher | None = None,
        poll_interval: float = 0.2,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self.path = path
        self._cipher = cipher
        self._poll_interval = poll_interval
        self._hub = TailHub()
        self._writer = SqliteWriter(path, self._woken, busy_timeout_s)
        self._readers = SqliteReaders(path, busy_s=busy_timeout_s)
        self._ledger_id = ""

    @property
    def ledger_id(self) -> str:
        """This store's own random id (see ``LedgerStore.ledger_id``)."""
        return self._ledger_id

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        cipher: SecretCipher | None = None,
        poll_interval: float = 0.2,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> SqliteStore:
        """Open (creating the file and applying migrations as needed)."""
        file = Path(path).expanduser()  # noqa: ASYNC240 - once, at open (may read passwd)
        file.parent.mkdir(parents=True, exist_ok=True)
        store = cls(file, cipher=cipher, poll_interval=poll_interval, busy_timeout_s=busy_timeout_s)
        await store._writer.start()
        try:
            await store.migrate()
            store._ledger_id = await store._readers.run(
                lambda c: str(c.execute(IDENTITY).fetchone()[0])
            )
        except BaseException:
            await store.close()
            raise
        return store

    async def migrate(self) -> int:
        """Apply pending migrations; returns how many were applied (0 when up to date)."""
        return await self._writer.submit(_migrate)

    async def schema_version(self) -> int:
        """The schema version of the database."""
        return await self._readers.run(
            lambda c: int(c.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])
        )

    def _woken(self, conversation_ids: set[str]) -> None:
        for conversation_id in conversation_ids:
            self._hub.notify(conversation_id)

    # -- conversations ---------------------------------------------------------------------

    async def create_conversation(self, record: ConversationRecord) -> None:
        sql, values = codec.insert_conversation(
            record, codec.record_json(record, self._cipher), "sqlite"
        )

        def work(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(sql, values)
            except sqlite3.IntegrityError as exc:
                raise ConflictError(f"conversation {record.id} already exists") from exc

        await self._writer.submit(work)
        self._hub.changed(record.id)

    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        row = await self._readers.run(
            lambda c: c.execute(
                "SELECT state FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
        )
        if row is None:
            raise NotFoundError(f"no conversation {conversation_id}")
        return codec.record_from_json(row[0], self._cipher)

    def _saver(self, record: ConversationRecord) -> Callable[[sqlite3.Connection], None]:
        keep_sealed = codec.needs_previous(record)
        state = None if keep_sealed else codec.record_json(record, self._cipher)

        def work(conn: sqlite3.Connection) -> None:
            saved = state
            if saved is None:
                row = conn.execute(
                    "SELECT state FROM conversations WHERE id = ?", (record.id,)
                ).fetchone()
                saved = codec.record_json(record, self._cipher, row[0] if row else None)
            cur = conn.execute(
                "UPDATE conversations SET project_id = ?, status = ?, state = ?, updated_at = ?,"
                " parent_id = ?, root_id = ? WHERE id = ?",
                (
                    record.task.project_id,
                    record.status.value,
                    saved,
                    codec.ts_text(record.updated_at),
                    record.parent_id,
                    record.root_id,
                    record.id,
                ),
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"no conversation {record.id}")

        return work

    async def save_conversation(self, record: ConversationRecord) -> None:
        await self._writer.submit(self._saver(record))
        self._hub.changed(record.id)

    async def transition(self, record: ConversationRecord, event: StatusChangeEvent) -> StoredEvent:
        codec.check_transition(record, event)
        save = self._saver(record)
        body = codec.event_json(event)

        def work(conn: sqlite3.Connection) -> tuple[int, datetime]:
            # One job is one transaction (a savepoint of the batch): both writes or neither.
            save(conn)
            return _insert_event(conn, record.id, event.kind, body)

        seq, moment = await self._writer.submit(work, wakes=record.id)
        self._hub.changed(record.id)
        return codec.envelope(record.id, seq, moment, event)

    # -- ownership -------------------------------------------------------------------------

    async def claim_conversation(
        self,
        conversation_id: str,
        claimant: RunClaimant,
        *,
        lease_s: float,
        displace: str | None = None,
    ) -> RunOwner:
        def work(conn: sqlite3.Connection) -> tuple[bool, tuple[Any, ...]]:
            # Read and write under the write lock (BEGIN IMMEDIATE): atomic across processes.
            moment = codec.now()
            stamp = codec.ts_text(moment)
            held = conn.execute(
                f"SELECT {_OWNER_COLUMNS} FROM conversation_owners"  # noqa: S608
                " WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if held is not None and not (
                held[5] < stamp or held[0] in {claimant.owner_id, displace}
            ):
                return False, held
            since = held[3] if held is not None and held[0] == claimant.owner_id else stamp
            row = (
                claimant.owner_id,
                claimant.host,
                claimant.pid,
                since,
                stamp,
                codec.ts_text(moment + timedelta(seconds=lease_s)),
            )
            try:
                conn.execute(
                    "INSERT INTO conversation_owners (conversation_id, owner_id, host, pid,"
                    " since, heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (conversation_id) DO UPDATE SET owner_id = excluded.owner_id,"
                    " host = excluded.host, pid = excluded.pid, since = excluded.since,"
                    " heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at",
                    (conversation_id, *row),
                )
            except sqlite3.IntegrityError as exc:
                raise NotFoundError(f"no conversation {conversation_id}") from exc
            return True, row

        won, row = await self._writer.submit(work)
        owner = codec.owner(row, ts=codec.parse_ts, expired=False)
        if not won:
            raise ConversationOwnedError(conversation_id, owner)
        return owner

    async def renew_claim(self, conversation_id: str, owner_id: str, *, lease_s: float) -> bool:
        moment = codec.now()

        expires = codec.ts_text(moment + timedelta(seconds=lease_s))

        def work(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE conversation_owners SET heartbeat_at = ?, expires_at = ?"
                " WHERE conversation_id = ? AND owner_id = ?",
                (codec.ts_text(moment), expires, conversation_id, owner_id),
            )
            if cur.rowcount != 1:
                return False
            conn.execute(_RENEW_EXECUTIONS, (expires, conversation_id))
            return True

        return await self._writer.submit(work)

    async def release_conversation(self, conversation_id: str, owner_id: str) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM conversation_owners WHERE conversation_id = ? AND owner_id = ?",
                (conversation_id, owner_id),
            )

        await self._writer.submit(work, single_statement=True)

    async def conversation_owner(self, conversation_id: str) -> RunOwner | None:
        row = await self._readers.run(
            lambda c: c.execute(
                f"SELECT {_OWNER_COLUMNS} FROM conversation_owners"  # noqa: S608
                " WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
        )
        if row is None:
            return None
        return codec.owner(row, ts=codec.parse_ts, expired=row[5] < codec.ts_text(codec.now()))

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
            dialect="sqlite",
            forge_events=forge_events,
        )
        rows = await self._readers.run(lambda c: c.execute(sql, params).fetchall())
        return codec.conversation_page(rows, limit, self._cipher)

    async def list_children(self, parent_id: str) -> list[ConversationRecord]:
        rows = await self._readers.run(
            lambda c: c.execute(
                "SELECT state FROM conversations WHERE parent_id = ? ORDER BY created_at, id",
                (parent_id,),
            ).fetchall()
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
            status, project_id, mark="?", true="1", search=search, forge_events=forge_events
        )
        sql = f"SELECT COUNT(*) FROM conversations WHERE {where}"  # noqa: S608
        return int(await self._readers.run(lambda c: c.execute(sql, params).fetchone()[0]))

    async def delete_conversation(self, conversation_id: str) -> None:
        def work(conn: sqlite3.Connection) -> list[str]:
            # The tree goes with its root; events go by the foreign key's cascade. The ledger
            # rows stay: money spent is never forgotten (see TREE_MEMBERS_SQL).
            ids = [
                r[0]
                for r in conn.execute(TREE_MEMBERS_SQL.format(mark="?"), (conversation_id,) * 2)
            ]
            if conversation_id not in ids:
                raise NotFoundError(f"no conversation {conversation_id}")
            conn.execute(DELETE_TREE_SQL.format(mark="?"), (conversation_id,) * 2)
            return ids

        for cid in await self._writer.submit(work, wakes=conversation_id):
            self._hub.changed(cid)
            self._hub.notify(cid)

    # -- event log -------------------------------------------------------------------------

    async def append(self, conversation_id: str, event: ConversationEvent) -> StoredEvent:
        body = codec.event_json(event)
        kind = event.kind

        usage = event.usage

        def work(conn: sqlite3.Connection) -> tuple[int, datetime]:
            stored = _insert_event(conn, conversation_id, kind, body)
            if usage is not None:  # a turn: the record's totals move in the same transaction
                _add_turn(conn, conversation_id, usage)
            return stored

        seq, moment = await self._writer.submit(
            work, wakes=conversation_id, single_statement=usage is None
        )
        if usage is not None:
            self._hub.changed(conversation_id)  # a listing shows the totals
        return codec.envelope(conversation_id, seq, moment, event)

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
            dialect="sqlite",
        )

        def read(conn: sqlite3.Connection) -> list[StoredEvent]:
            # Decoded on the reader thread: a long page must not stall the event loop.
            rows = conn.execute(query.sql, query.params).fetchall()
            if query.backwards:
                rows.reverse()
            return codec.stored_events(conversation_id, rows)

        return await self._readers.run(read)

    async def _exists(self, conversation_id: str) -> bool:
        row = await self._readers.run(
            lambda c: c.execute(
                "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
        )
        return row is not None

    async def last_seq(self, conversation_id: str) -> int:
        row = await self._readers.run(
            lambda c: c.execute(
                "SELECT COALESCE((SELECT MAX(seq) FROM events WHERE conversation_id = c.id), 0)"
                " FROM conversations AS c WHERE c.id = ?",
                (conversation_id,),
            ).fetchone()
        )
        if row is None:
            raise NotFoundError(f"no conversation {conversation_id}")
        return int(row[0])

    async def reconcile_after_restart(self) -> ReconcileReport:
        return await reconcile(self)

    async def close(self) -> None:
        await self._writer.close()
        await self._readers.close()

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
        stamp = codec.ts_text(codec.now())
        ceiling = None if cost_ceiling_usd is None else str(cost_ceiling_usd)

        def work(conn: sqlite3.Connection) -> dict[str, Any]:
            conn.execute(
                "INSERT INTO executions (execution_id, conversation_id, model, provider,"
                " cost_ceiling_usd, cost_usd, status, created_at, updated_at, lease_expires_at)"
                " VALUES (?, ?, ?, ?, ?, '0', ?, ?, ?, (SELECT expires_at FROM"
                " conversation_owners WHERE conversation_id = ?)) ON CONFLICT (execution_id)"
                " DO NOTHING",
                (
                    execution_id,
                    conversation_id,
                    model,
                    provider,
                    ceiling,
                    ExecutionStatus.ACTIVE.value,
                    stamp,
                    stamp,
                    conversation_id,
                ),
            )
            return execution_row(conn, execution_id)

        return codec.execution_from_row(await self._writer.submit(work))

    async def record_usage(
        self, execution_id: str, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        stamp = codec.ts_text(codec.now())

        def work(conn: sqlite3.Connection) -> dict[str, Any]:
            # One statement: concurrent recorders (threads or processes) never lose an add.
            cur = conn.cursor()
            cur.row_factory = sqlite3.Row
            row = cur.execute(
                "UPDATE executions SET requests = requests + 1, tokens_in = tokens_in + ?,"
                " tokens_out = tokens_out + ?, cost_usd = dec_add(cost_usd, ?), updated_at = ?"
                " WHERE execution_id = ? RETURNING *",
                (tokens_in, tokens_out, str(cost_usd), stamp, execution_id),
            ).fetchone()
            if row is None:
                raise NotFoundError(f"no execution {execution_id} in the ledger")
            return dict(row)

        return codec.execution_from_row(await self._writer.submit(work))

    async def get_execution(self, execution_id: str) -> ExecutionUsage:
        row = await self._readers.run(lambda c: execution_row(c, execution_id))
        return codec.execution_from_row(row)

    async def executions_of(self, conversation_id: str) -> list[ExecutionUsage]:
        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            cur = conn.cursor()
            cur.row_factory = sqlite3.Row
            rows = cur.execute(
                "SELECT * FROM executions WHERE conversation_id = ? ORDER BY created_at",
                (conversation_id,),
            ).fetchall()
            return [dict(row) for row in rows]

        return [codec.execution_from_row(row) for row in await self._readers.run(read)]

    async def set_cost_ceiling(
        self, execution_id: str, cost_ceiling_usd: Decimal | None
    ) -> ExecutionUsage:
        stamp = codec.ts_text(codec.now())
        ceiling = None if cost_ceiling_usd is None else str(cost_ceiling_usd)

        def work(conn: sqlite3.Connection) -> dict[str, Any]:
            conn.execute(
                "UPDATE executions SET cost_ceiling_usd = ?, updated_at = ? WHERE execution_id = ?",
                (ceiling, stamp, execution_id),
            )
            return execution_row(conn, execution_id)

        return codec.execution_from_row(await self._writer.submit(work))

    async def tree_budget(self, conversation_id: str) -> TreeBudget | None:
        sql = TREE_COSTS_SQL.format(mark="?")

        async def costs(root_id: str) -> list[object]:
            rows = await self._readers.run(lambda c: c.execute(sql, (root_id, root_id)).fetchall())
            return [row[0] for row in rows]

        return await read_tree_budget(conversation_id, self.get_conversation, costs)

    async def set_execution_status(
        self, execution_id: str, status: ExecutionStatus, reason: str = ""
    ) -> ExecutionUsage:
        stamp = codec.ts_text(codec.now())

        def work(conn: sqlite3.Connection) -> dict[str, Any]:
            # Killed is final: the guard is in the statement so a racing update cannot revive it.
            conn.execute(
                "UPDATE executions SET status = ?, status_reason = ?, updated_at = ?"
                " WHERE execution_id = ? AND status != ?",
                (status.value, reason, stamp, execution_id, ExecutionStatus.KILLED.value),
            )
            return execution_row(conn, execution_id)

        return codec.execution_from_row(await self._writer.submit(work))


def _insert_event(
    conn: sqlite3.Connection, conversation_id: str, kind: str, body: str
) -> tuple[int, datetime]:
    # One statement. The seq is read and used under SQLite's write lock (one writer per
    # database, across processes), so MAX + 1 cannot be handed out twice.
    moment = codec.now()
    try:
        row = conn.execute(
            "INSERT INTO events (conversation_id, seq, ts, kind, body)"
            " SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM events"
            " WHERE conversation_id = ? RETURNING seq",
            (conversation_id, codec.ts_text(moment), kind, body, conversation_id),
        ).fetchone()
    except sqlite3.IntegrityError as exc:  # the foreign key: no such conversation
        raise NotFoundError(f"no conversation {conversation_id}") from exc
    return int(row[0]), moment


def _add_turn(conn: sqlite3.Connection, conversation_id: str, usage: TokenUsage) -> None:
    # Read and written under the writer's transaction; the sum in Decimal (SQLite's own
    # arithmetic on the JSON would be floating point).
    row = conn.execute(
        "SELECT json_extract(state, '$.usage'), json_extract(state, '$.turns')"
        " FROM conversations WHERE id = ?",
        (conversation_id,),
    ).fetchone()
    total = TokenUsage.model_validate_json(row[0]) + usage
    conn.execute(
        "UPDATE conversations SET state = json_set(state, '$.usage', json(?), '$.turns', ?)"
        " WHERE id = ?",
        (total.model_dump_json(), int(row[1]) + 1, conversation_id),
    )
