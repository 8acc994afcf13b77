"""Store benchmark: SqliteStore and PostgresStore against the raw driver, measured in one run.

    uv run python benchmarks/store_bench.py [--backends sqlite,postgres] [--events 2000]
        [--replay 100000] [--rounds 5] [--pg postgresql://postgres@127.0.0.1:5432/test]

For each backend: append throughput (one writer; 8 concurrent writers, one conversation
each), replay of a 100,000-event conversation, and p50/p99 of a 100-event history page. The
baseline inserts/reads the same rows into an identical schema with plain sqlite3 / psycopg:
one autocommitted INSERT per event (same durability: SQLite WAL + synchronous=FULL,
PostgreSQL synchronous_commit=on), a plain SELECT for reads (rows only, no model parsing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from synthorg.domain import (
    ActionEvent,
    AgentIdentity,
    ConversationEvent,
    ConversationRecord,
    MessageEvent,
    ObservationEvent,
    Task,
    TokenUsage,
)
from synthorg.store import Store, open_store
from synthorg.store.codec import event_json, ts_text
from synthorg.store.schema import MIGRATIONS, VERSION_TABLE, render

WRITERS = 8
PAGE_SAMPLES = 300


def sample_events() -> list[ConversationEvent]:
    """A realistic mix: assistant turns, tool calls, tool output."""
    return [
        MessageEvent(
            kind="message",
            role="assistant",
            text="I will look at the failing test first. " * 5,
            usage=TokenUsage(tokens_in=1200, tokens_out=80),
        ),
        ActionEvent(
            kind="action",
            action_id="a-0001",
            tool_name="terminal",
            arguments={"command": "pytest -q tests/test_parser.py", "timeout": 120},
            summary="run the parser tests",
        ),
        ObservationEvent(action_id="a-0001", content="F..\n" + "E   assert 1 == 2\n" * 8),
        MessageEvent(role="user", text="please keep the public API unchanged"),
    ]


def record(cid: str) -> ConversationRecord:
    now = datetime.now(UTC)
    return ConversationRecord(
        id=cid,
        task=Task(id=f"t-{cid}", project_id="bench", prompt="bench", repository="/r"),
        agent=AgentIdentity(id="bench"),
        loop_type="react",
        model="m",
        created_at=now,
        updated_at=now,
    )


def fmt_rate(value: float) -> str:
    return f"{value:,.0f} ev/s"


class Row:
    """One line of the report."""

    def __init__(self, backend: str, metric: str, ours: float, raw: float, unit: str) -> None:
        self.backend, self.metric, self.ours, self.raw, self.unit = backend, metric, ours, raw, unit

    def cells(self) -> list[str]:
        if self.unit == "ev/s":
            ratio = self.raw / self.ours  # >1: slower than raw
            return [
                self.backend,
                self.metric,
                fmt_rate(self.ours),
                fmt_rate(self.raw),
                f"{ratio:.2f}x",
            ]
        ratio = self.ours / self.raw
        return [
            self.backend,
            self.metric,
            f"{self.ours:.3f} {self.unit}",
            f"{self.raw:.3f} {self.unit}",
            f"{ratio:.2f}x",
        ]


# -- shared store-side measurements ------------------------------------------------------


async def store_single(store: Store, n: int, bodies: list[ConversationEvent]) -> float:
    cid = f"single-{secrets.token_hex(4)}"
    await store.create_conversation(record(cid))
    start = time.perf_counter()
    for i in range(n):
        await store.append(cid, bodies[i % len(bodies)])
    return n / (time.perf_counter() - start)


async def store_concurrent(store: Store, n: int, bodies: list[ConversationEvent]) -> float:
    cids = [f"conc-{w}-{secrets.token_hex(4)}" for w in range(WRITERS)]
    for cid in cids:
        await store.create_conversation(record(cid))

    async def writer(cid: str) -> None:
        for i in range(n // WRITERS):
            await store.append(cid, bodies[i % len(bodies)])

    start = time.perf_counter()
    await asyncio.gather(*(writer(cid) for cid in cids))
    return (n // WRITERS * WRITERS) / (time.perf_counter() - start)


REPLAY_CPU: list[float] = []


async def store_replay(store: Store, cid: str, total: int) -> float:
    start = time.perf_counter()
    cpu = time.process_time()
    after, count = 0, 0
    while True:
        page = await store.history(cid, after=after, limit=5000)
        if not page:
            break
        count += len(page)
        after = page[-1].seq
    elapsed = time.perf_counter() - start
    REPLAY_CPU.append(time.process_time() - cpu)
    assert count == total, (count, total)
    return elapsed


async def store_pages(store: Store, cid: str, total: int) -> list[float]:
    rng = secrets.SystemRandom()
    times = []
    for _ in range(PAGE_SAMPLES):
        after = rng.randrange(0, total - 100)
        start = time.perf_counter()
        page = await store.history(cid, after=after, limit=100)
        times.append((time.perf_counter() - start) * 1000)
        assert len(page) == 100
    return times


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def measure(
    backend: str,
    store: Store,
    raw_single: Callable[[], Awaitable[float]],
    raw_concurrent: Callable[[], Awaitable[float]],
    seed_replay: Callable[[str, int], Awaitable[None]],
    raw_replay: Callable[[str], Awaitable[float]],
    raw_pages: Callable[[str, int], Awaitable[list[float]]],
    args: argparse.Namespace,
) -> list[Row]:
    # Store and raw runs alternate, and each figure is the median over the rounds: the
    # machine's fsync latency and load vary from second to second.
    bodies = sample_events()
    med = statistics.median
    single: tuple[list[float], list[float]] = ([], [])
    many: tuple[list[float], list[float]] = ([], [])
    for _ in range(args.rounds):
        single[1].append(await raw_single())
        single[0].append(await store_single(store, args.events, bodies))
        many[1].append(await raw_concurrent())
        many[0].append(await store_concurrent(store, args.events * 2, bodies))
    rows = [
        Row(backend, "append, 1 writer", med(single[0]), med(single[1]), "ev/s"),
        Row(backend, f"append, {WRITERS} writers", med(many[0]), med(many[1]), "ev/s"),
    ]
    cid = f"replay-{secrets.token_hex(4)}"
    await store.create_conversation(record(cid))
    await seed_replay(cid, args.replay)
    replay: tuple[list[float], list[float]] = ([], [])
    for _ in range(3):
        replay[1].append(await raw_replay(cid))
        replay[0].append(await store_replay(store, cid, args.replay))
    rows.append(Row(backend, f"replay {args.replay:,} events", med(replay[0]), med(replay[1]), "s"))
    cpu = med(REPLAY_CPU[-3:])
    print(f"{backend}: replay CPU time of this process (median of 3): {cpu:.3f} s", flush=True)
    ours_pages = await store_pages(store, cid, args.replay)
    raw_p = await raw_pages(cid, args.replay)
    rows.append(Row(backend, "history page (100) p50", pct(ours_pages, 50), pct(raw_p, 50), "ms"))
    rows.append(Row(backend, "history page (100) p99", pct(ours_pages, 99), pct(raw_p, 99), "ms"))
    return rows


# -- SQLite --------------------------------------------------------------------------------


def sqlite_conn(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection with the store's durability settings."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def sqlite_schema(conn: sqlite3.Connection) -> None:
    conn.execute(render(VERSION_TABLE, "sqlite"))
    for migration in MIGRATIONS:
        for statement in migration.statements:
            conn.execute(render(statement, "sqlite"))


def sqlite_conversation(conn: sqlite3.Connection, cid: str) -> None:
    stamp = ts_text(datetime.now(UTC))
    conn.execute(
        "INSERT INTO conversations (id, project_id, status, state, created_at, updated_at)"
        " VALUES (?, 'bench', 'created', '{}', ?, ?)",
        (cid, stamp, stamp),
    )


def encoded() -> list[tuple[str, str]]:
    return [(e.kind, event_json(e)) for e in sample_events()]


def sqlite_insert_run(path: Path, cid: str, n: int) -> None:
    conn = sqlite_conn(path)
    rows = encoded()
    for i in range(n):
        kind, body = rows[i % len(rows)]
        conn.execute(
            "INSERT INTO events (conversation_id, seq, ts, kind, body) VALUES (?, ?, ?, ?, ?)",
            (cid, i + 1, ts_text(datetime.now(UTC)), kind, body),
        )
    conn.close()


async def bench_sqlite(args: argparse.Namespace) -> list[Row]:
    tmp = Path(tempfile.mkdtemp(prefix="synthorg-bench-"))
    raw_path = tmp / "raw.db"
    with sqlite_conn(raw_path) as setup:
        sqlite_schema(setup)
    store = await open_store(tmp / "store.db")
    store_file = tmp / "store.db"

    async def raw_single() -> float:
        cid = f"raw-{secrets.token_hex(4)}"
        sqlite_conversation(sqlite_conn(raw_path), cid)
        start = time.perf_counter()
        sqlite_insert_run(raw_path, cid, args.events)
        return args.events / (time.perf_counter() - start)

    async def raw_concurrent() -> float:
        n = args.events * 2 // WRITERS
        cids = [f"rawc-{w}-{secrets.token_hex(4)}" for w in range(WRITERS)]
        for cid in cids:
            sqlite_conversation(sqlite_conn(raw_path), cid)
        threads = [
            threading.Thread(target=sqlite_insert_run, args=(raw_path, cid, n)) for cid in cids
        ]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return n * WRITERS / (time.perf_counter() - start)

    async def seed(cid: str, total: int) -> None:
        conn = sqlite_conn(store_file)
        rows = encoded()
        stamp = ts_text(datetime.now(UTC))
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO events (conversation_id, seq, ts, kind, body) VALUES (?, ?, ?, ?, ?)",
            ((cid, i + 1, stamp, *rows[i % len(rows)]) for i in range(total)),
        )
        conn.execute("UPDATE conversations SET last_seq = ? WHERE id = ?", (total, cid))
        conn.execute("COMMIT")
        conn.close()

    async def raw_replay(cid: str) -> float:
        conn = sqlite_conn(store_file)
        start = time.perf_counter()
        rows = conn.execute(
            "SELECT seq, ts, body FROM events WHERE conversation_id = ? ORDER BY seq", (cid,)
        ).fetchall()
        elapsed = time.perf_counter() - start
        assert len(rows) == args.replay
        conn.close()
        return elapsed

    async def raw_pages(cid: str, total: int) -> list[float]:
        conn = sqlite_conn(store_file)
        rng = secrets.SystemRandom()
        times = []
        for _ in range(PAGE_SAMPLES):
            after = rng.randrange(0, total - 100)
            start = time.perf_counter()
            conn.execute(
                "SELECT seq, ts, body FROM events WHERE conversation_id = ? AND seq > ?"
                " ORDER BY seq LIMIT 100",
                (cid, after),
            ).fetchall()
            times.append((time.perf_counter() - start) * 1000)
        conn.close()
        return times

    try:
        return await measure(
            "sqlite", store, raw_single, raw_concurrent, seed, raw_replay, raw_pages, args
        )
    finally:
        await store.close()


# -- PostgreSQL ----------------------------------------------------------------------------


def schema_url(admin: str, schema: str) -> str:
    sep = "&" if "?" in admin else "?"
    return f"{admin}{sep}options=-csearch_path%3D{schema}"


async def bench_postgres(args: argparse.Namespace) -> list[Row]:
    suffix = secrets.token_hex(4)
    ours_schema, raw_schema = f"bench_store_{suffix}", f"bench_raw_{suffix}"
    async with await psycopg.AsyncConnection.connect(args.pg, autocommit=True) as admin:
        for schema in (ours_schema, raw_schema):
            await admin.execute(f"CREATE SCHEMA {schema}")
    ours_url, raw_url = schema_url(args.pg, ours_schema), schema_url(args.pg, raw_schema)
    store = await open_store(ours_url)
    async with await psycopg.AsyncConnection.connect(raw_url, autocommit=True) as conn:
        for migration in MIGRATIONS:
            for statement in migration.statements:
                await conn.execute(render(statement, "postgres"))  # type: ignore[arg-type]

    async def conversation(conn: psycopg.AsyncConnection[Any], cid: str) -> None:
        await conn.execute(
            "INSERT INTO conversations (id, project_id, status, state, created_at, updated_at)"
            " VALUES (%s, 'bench', 'created', '{}', now(), now())",
            (cid,),
        )

    async def insert_run(cid: str, n: int) -> None:
        rows = encoded()
        async with await psycopg.AsyncConnection.connect(raw_url, autocommit=True) as conn:
            await conversation(conn, cid)
            for i in range(n):
                kind, body = rows[i % len(rows)]
                await conn.execute(
                    "INSERT INTO events (conversation_id, seq, ts, kind, body)"
                    " VALUES (%s, %s, now(), %s, %s::jsonb)",
                    (cid, i + 1, kind, body),
                )

    async def raw_single() -> float:
        start = time.perf_counter()
        await insert_run(f"raw-{secrets.token_hex(4)}", args.events)
        return args.events / (time.perf_counter() - start)

    async def raw_concurrent() -> float:
        n = args.events * 2 // WRITERS
        start = time.perf_counter()
        await asyncio.gather(
            *(insert_run(f"rawc-{w}-{secrets.token_hex(4)}", n) for w in range(WRITERS))
        )
        return n * WRITERS / (time.perf_counter() - start)

    async def seed(cid: str, total: int) -> None:
        rows = encoded()
        async with await psycopg.AsyncConnection.connect(ours_url) as conn:
            async with (
                conn.cursor() as cur,
                cur.copy("COPY events (conversation_id, seq, ts, kind, body) FROM STDIN") as copy,
            ):
                stamp = datetime.now(UTC)
                for i in range(total):
                    await copy.write_row((cid, i + 1, stamp, *rows[i % len(rows)]))
            await conn.execute("UPDATE conversations SET last_seq = %s WHERE id = %s", (total, cid))
            await conn.commit()

    async def raw_replay(cid: str) -> float:
        async with await psycopg.AsyncConnection.connect(ours_url, autocommit=True) as conn:
            start = time.perf_counter()
            cur = await conn.execute(
                "SELECT seq, ts, body::text FROM events WHERE conversation_id = %s ORDER BY seq",
                (cid,),
            )
            rows = await cur.fetchall()
            elapsed = time.perf_counter() - start
        assert len(rows) == args.replay
        return elapsed

    async def raw_pages(cid: str, total: int) -> list[float]:
        rng = secrets.SystemRandom()
        times = []
        async with await psycopg.AsyncConnection.connect(ours_url, autocommit=True) as conn:
            for _ in range(PAGE_SAMPLES):
                after = rng.randrange(0, total - 100)
                start = time.perf_counter()
                cur = await conn.execute(
                    "SELECT seq, ts, body::text FROM events WHERE conversation_id = %s"
                    " AND seq > %s ORDER BY seq LIMIT 100",
                    (cid, after),
                )
                await cur.fetchall()
                times.append((time.perf_counter() - start) * 1000)
        return times

    try:
        return await measure(
            "postgres", store, raw_single, raw_concurrent, seed, raw_replay, raw_pages, args
        )
    finally:
        await store.close()
        async with await psycopg.AsyncConnection.connect(args.pg, autocommit=True) as admin:
            for schema in (ours_schema, raw_schema):
                await admin.execute(f"DROP SCHEMA {schema} CASCADE")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--events", type=int, default=2000, help="appends per single-writer run")
    parser.add_argument("--replay", type=int, default=100_000, help="events in the replay")
    parser.add_argument("--rounds", type=int, default=5, help="alternating append rounds")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    rows: list[Row] = []
    for backend in args.backends.split(","):
        bench = {"sqlite": bench_sqlite, "postgres": bench_postgres}[backend]
        rows += await bench(args)
    print(f"load average at end: {os.getloadavg()[0]:.2f}", flush=True)
    header = ["backend", "metric", "store", "raw driver", "store/raw cost"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")


if __name__ == "__main__":
    asyncio.run(main())
