"""The PostgreSQL store's connections: the pool and its bounds, errors mapped to
StoreUnavailableError, migrations, and waking followers after a commit.

See ``postgres.py`` for the store and how its live tail is woken across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any, Self

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from synthorg.store import codec
from synthorg.store.config import PgTimeouts, describe
from synthorg.store.errors import RESUME_HINT, StoreUnavailableError
from synthorg.store.pg_listen import RECORD_CHANGED, Listener, Notifier
from synthorg.store.schema import IDENTIFY, IDENTITY, VERSION_TABLE, pending, render
from synthorg.store.secrets import SecretCipher
from synthorg.store.tail import TailHub

_MIGRATION_LOCK = 0x5F0A_5107  # advisory lock key: one migrator at a time per database


class PostgresEngine:
    """The pool, its query helpers and the schema; the base of every PostgresStore part."""

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
    ) -> Self:
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

    def _changed(self, conversation_id: str, *, appended: bool = False) -> None:
        """The record changed (and an event was appended, when ``appended``): tell this
        process's watchers (and followers), then the other processes'."""
        self._hub.changed(conversation_id)
        self._notifier.notify(RECORD_CHANGED + conversation_id)
        if appended:
            self._hub.notify(conversation_id)
            self._notifier.notify(conversation_id)

    async def close(self) -> None:
        await self._notifier.stop()
        await self._listener.stop()
        await self._pool.close()
