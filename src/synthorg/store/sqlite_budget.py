"""Budget reservations on SQLite: admission holds shared by every process on the file.

SQLite serves one host, so the database's write lock is the budget lock: every statement here
runs in the writer's ``BEGIN IMMEDIATE`` transaction, which no other process's writer can hold
at the same time. Under it an admission bills the holds whose lease ran out (their holder died
mid-request: the incomplete bill), reads spend and live holds, and stores its own hold, as on
PostgreSQL (``postgres_budget``); settling deletes the hold and adds the bill in the same
transaction. Holds are written without an fsync (``durable=False``): they bound what live
processes admit, and the next bill's sync makes them durable too. A bill is committed unsynced
and then made durable by an fsync of the WAL outside the write lock (``synced=True``),
so admissions never queue behind it. For the process's lone request in flight both run on the
caller's thread when the write lock is free (``SqliteWriter.write_now``), else through the
writer thread.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any, TypeVar

from synthorg.domain.money import ZERO, money, remaining, total
from synthorg.errors import NotFoundError
from synthorg.store import codec
from synthorg.store.protocol import (
    OVERREPORT,
    BudgetFigures,
    BudgetHold,
    ExecutionStatus,
    ExecutionUsage,
    TreeBudget,
)
from synthorg.store.sqlite_engine import SqliteReaders, SqliteWriter

T = TypeVar("T")

_KEY = "SELECT coalesce(root_id, id) FROM conversations WHERE id = ?"

_OVERREPORTS = (
    "SELECT provider, count(*) FROM executions WHERE status = ? AND status_reason LIKE ?"
    " GROUP BY provider ORDER BY provider"
)


def execution_row(conn: sqlite3.Connection, execution_id: str) -> dict[str, Any]:
    """The ledger row of ``execution_id`` as a dict; NotFoundError when there is none."""
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    row = cur.execute("SELECT * FROM executions WHERE execution_id = ?", (execution_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no execution {execution_id} in the ledger")
    return dict(row)


def _budget_key(conn: sqlite3.Connection, conversation_id: str) -> str:
    """The budget a conversation's runs spend from: its tree's root, else itself."""
    found = conn.execute(_KEY, (conversation_id,)).fetchone()
    return str(found[0]) if found is not None else conversation_id


def _bill(
    conn: sqlite3.Connection, execution_id: str, cost: Decimal, tin: int, tout: int, n: int
) -> None:
    conn.execute(
        "UPDATE executions SET cost_usd = dec_add(cost_usd, ?), tokens_in = tokens_in + ?,"
        " tokens_out = tokens_out + ?, requests = requests + ?, updated_at = ?"
        " WHERE execution_id = ?",
        (str(cost), tin, tout, n, codec.ts_text(codec.now()), execution_id),
    )


def _bill_expired(conn: sqlite3.Connection, key: str) -> None:
    """Bill the budget's expired holds in full to their executions (the incomplete bill)."""
    gone = conn.execute(
        "DELETE FROM budget_reservations WHERE budget_key = ? AND expires_at < ?"
        " RETURNING execution_id, amount, tokens_in, tokens_out",
        (key, codec.ts_text(codec.now())),
    ).fetchall()
    for execution_id, amount, tin, tout in gone:
        _bill(conn, execution_id, money(amount), tin, tout, 1)


_FIGURES = (
    "SELECT e.*,"
    " (SELECT coalesce(dec_sum(amount), 0) FROM budget_reservations WHERE execution_id = :eid)"
    " AS held,"
    " (SELECT json_extract(state, '$.budget_usd') FROM conversations WHERE id = :key)"
    " AS tree_ceiling,"
    " (SELECT coalesce(dec_sum(x.cost_usd), 0) FROM executions x JOIN conversations c"
    " ON c.id = x.conversation_id WHERE c.id = :key OR c.root_id = :key) AS tree_spent,"
    " (SELECT coalesce(dec_sum(amount), 0) FROM budget_reservations WHERE budget_key = :key)"
    " AS tree_held"
    " FROM executions e WHERE e.execution_id = :eid"
)
"""The execution's row, its live holds, and its tree's ceiling, spend and holds: one read."""


def _figures(conn: sqlite3.Connection, key: str, execution_id: str) -> BudgetFigures:
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    found = cur.execute(_FIGURES, {"eid": execution_id, "key": key}).fetchone()
    if found is None:
        raise NotFoundError(f"no execution {execution_id} in the ledger")
    row = dict(found)
    ceiling = row["tree_ceiling"]
    return BudgetFigures(
        execution=codec.execution_from_row(row),
        reserved=money(row["held"]),
        tree=None
        if ceiling is None
        else TreeBudget(root_id=key, ceiling=money(ceiling), spent=money(row["tree_spent"])),
        tree_reserved=money(row["tree_held"]),
    )


class SqliteBudget:
    """SharedBudgetLedger on SQLite (mixed into SqliteStore)."""

    _writer: SqliteWriter
    _readers: SqliteReaders
    _holding: dict[str, float] | None = None
    """This process's holds whose requests are not answered yet (settling starts after the
    answer), each until its lease would end: its requests in flight. One whose answer was
    lost (never settled) stops counting once its lease is over."""

    def _in_flight(self) -> dict[str, float]:
        """The live entries of ``_holding`` (the expired dropped)."""
        if self._holding is None:
            self._holding = {}
        elif self._holding:
            now = time.monotonic()
            for gone in [r for r, until in self._holding.items() if until <= now]:
                del self._holding[gone]
        return self._holding

    async def _write(
        self, work: Callable[[sqlite3.Connection], T], *, alone: bool, synced: bool = False
    ) -> T:
        """A hold's or a bill's write. With no other request of this process in flight it runs
        on the event loop's thread (no hand-off: the loop has nothing else to do); with others
        it queues to the writer thread, which commits their holds and bills together (one
        commit for many) while the loop serves the rest."""
        if alone:
            return await self._writer.write_now(work, synced=synced)
        return await self._writer.submit(work, durable=False, synced=synced)

    async def reserve_budget(
        self,
        hold: BudgetHold,
        *,
        holder: str,
        lease_s: float,
        admit: Callable[[BudgetFigures], bool],
    ) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            key = _budget_key(conn, hold.conversation_id)
            _bill_expired(conn, key)
            if not admit(_figures(conn, key, hold.execution_id)):
                return False
            moment = codec.now()
            conn.execute(
                "INSERT INTO budget_reservations (reservation_id, budget_key, execution_id,"
                " holder, amount, tokens_in, tokens_out, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    hold.reservation_id,
                    key,
                    hold.execution_id,
                    holder,
                    str(hold.amount),
                    hold.tokens_in,
                    hold.tokens_out,
                    codec.ts_text(moment),
                    codec.ts_text(moment + timedelta(seconds=lease_s)),
                ),
            )
            return True

        flying = self._in_flight()
        alone = not flying
        flying[hold.reservation_id] = time.monotonic() + lease_s  # in flight from now on
        held = False
        try:
            held = await self._write(work, alone=alone)
        finally:
            if not held:  # declined or failed: nothing of it is in flight
                flying.pop(hold.reservation_id, None)
        return held

    async def committed_budget(self, conversation_id: str, members: Sequence[str]) -> Decimal:
        marks = ", ".join("?" * len(members)) or "NULL"

        def work(conn: sqlite3.Connection) -> Decimal:
            _bill_expired(conn, _budget_key(conn, conversation_id))
            spent = conn.execute(
                f"SELECT cost_usd FROM executions WHERE conversation_id IN ({marks})",  # noqa: S608
                tuple(members),
            ).fetchall()
            held = conn.execute(
                "SELECT r.amount FROM budget_reservations r JOIN executions x"  # noqa: S608
                f" ON x.execution_id = r.execution_id WHERE x.conversation_id IN ({marks})",
                tuple(members),
            ).fetchall()
            return total(money(row[0]) for row in (*spent, *held))

        return await self._writer.submit(work)

    async def settle_reservation(
        self, hold: BudgetHold, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        def work(conn: sqlite3.Connection) -> dict[str, Any]:
            held = conn.execute(
                "DELETE FROM budget_reservations WHERE reservation_id = ?", (hold.reservation_id,)
            ).rowcount
            if held:
                _bill(conn, hold.execution_id, cost_usd, tokens_in, tokens_out, 1)
            else:  # expired and billed in full already: only the excess is added
                _bill(conn, hold.execution_id, remaining(cost_usd, hold.amount) or ZERO, 0, 0, 0)
            return execution_row(conn, hold.execution_id)

        # Committed unsynced, then synced outside the write lock: the next admission's hold
        # does not wait for this bill's fsync; the caller returns once the bill is durable.
        flying = self._in_flight()
        flying.pop(hold.reservation_id, None)  # answered: no longer in flight
        row = await self._write(work, alone=not flying, synced=True)
        return codec.execution_from_row(row)

    async def overreporting_providers(self) -> dict[str, int]:
        def read(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute(_OVERREPORTS, (ExecutionStatus.KILLED.value, f"{OVERREPORT}:%"))
            return {str(provider): int(n) for provider, n in rows.fetchall()}

        return await self._readers.run(read)

    async def renew_reservations(
        self, holder: str, reservation_ids: Sequence[str], *, lease_s: float
    ) -> int:
        marks = ", ".join("?" * len(reservation_ids)) or "NULL"
        expires = codec.ts_text(codec.now() + timedelta(seconds=lease_s))

        def work(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "UPDATE budget_reservations SET expires_at = ?"  # noqa: S608
                f" WHERE holder = ? AND reservation_id IN ({marks})",
                (expires, holder, *reservation_ids),
            )
            return cur.rowcount

        return await self._writer.submit(work, single_statement=True, durable=False)
