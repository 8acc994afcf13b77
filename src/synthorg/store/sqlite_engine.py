"""SQLite plumbing: connections, one writer thread with group commit, a reader pool.

All writes of a process go through one thread and one connection. The writer takes whatever
jobs are queued, runs each in a savepoint of one ``BEGIN IMMEDIATE`` transaction and commits
once (``synchronous=FULL``: the WAL is fsynced before the commit returns), then answers every
job. A caller is answered only after its commit, so an acknowledged write is durable; batching
is what lets concurrent writers share one fsync. ``BEGIN IMMEDIATE`` plus ``busy_timeout``
make several processes on the same file queue for the write lock instead of failing.

Budget holds and bills (a few indexed statements each, on every gateway request) may run on
the calling thread instead (``SqliteWriter.write_now``, chosen by ``SqliteBudget._write`` for a
process's lone request in flight) when the write lock is free at once: two thread hand-offs
fewer per request (16% less gateway CPU at c=1, docs/benchmarks.md); when the lock is taken
they queue to the writer as any job.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from synthorg.errors import BoundaryError
from synthorg.store.errors import RESUME_HINT, StoreUnavailableError

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0
_MAX_BATCH = 512


def _dec_add(left: str | None, right: str | None) -> str:
    # Exact decimal arithmetic inside one UPDATE statement (SQLite has no decimal type).
    return str(Decimal(left or "0") + Decimal(right or "0"))


class _DecSum:
    """``dec_sum(x)``: the exact sum of decimal text (SQLite's sum() goes through floats)."""

    def __init__(self) -> None:
        self.total = Decimal(0)

    def step(self, value: str | None) -> None:
        if value is not None:
            self.total += Decimal(value)

    def finalize(self) -> str:
        return str(self.total)


def unavailable(path: Path, exc: sqlite3.Error, busy_s: float) -> StoreUnavailableError:
    """The SQLite failure as one clear error: which store, what is wrong, what to do."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        what = (
            f"is locked by another process (waited {busy_s:g} s); find it with "
            f"`fuser {path}` or raise [store] busy_timeout_s"
        )
    elif name.startswith("SQLITE_READONLY"):
        what = "is read-only; make the file and its directory writable by this user"
    elif name == "SQLITE_FULL":
        what = "cannot grow: the disk (or quota) holding it is full; free space"
    elif name.startswith("SQLITE_CANTOPEN"):
        what = "cannot be opened; check that its directory exists and is writable"
    else:
        what = f"failed ({exc})"
    failure = StoreUnavailableError(f"the SQLite store at {path} {what}; {RESUME_HINT}")
    failure.__cause__ = exc
    return failure


def connect(path: Path, busy_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A connection configured for the store: WAL, full sync, foreign keys, busy wait."""
    try:
        conn = sqlite3.connect(
            path,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,
            timeout=busy_s,
        )
        # Every wait for another process's lock is bounded, then ends in a clear error.
        conn.execute(f"PRAGMA busy_timeout={int(busy_s * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.create_function("dec_add", 2, _dec_add, deterministic=True)
        # typeshed types an aggregate as taking ints only
        conn.create_aggregate("dec_sum", 1, _DecSum)  # type: ignore[arg-type]
    except sqlite3.Error as exc:
        raise unavailable(path, exc, busy_s) from exc
    return conn


@dataclass
class _Job:
    work: Callable[[sqlite3.Connection], Any]
    future: concurrent.futures.Future[Any]
    wakes: str | None = None
    single_statement: bool = False
    durable: bool = True
    synced: bool = False
    """Answered only once its commit is fsynced (by the sync thread, outside the write lock)."""
    result: Any = None
    error: BaseException | None = None
    ran: bool = field(default=False)


class SqliteWriter:
    """The process's single writing thread for one database file."""

    def __init__(
        self, path: Path, on_commit: Callable[[set[str]], None], busy_s: float = BUSY_TIMEOUT_S
    ) -> None:
        self._path = path
        self._busy_s = busy_s
        self._on_commit = on_commit
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, name=f"synthorg-sqlite-writer:{path.name}", daemon=True
        )
        self._to_sync: queue.SimpleQueue[tuple[int, list[_Job]] | None] = queue.SimpleQueue()
        self._syncer = threading.Thread(
            target=self._sync_loop, name=f"synthorg-sqlite-sync:{path.name}", daemon=True
        )
        self._closed = False
        self._durable = True
        """The writer connection's synchronous mode: FULL (fsync each commit) or NORMAL."""
        self._commits = 0
        """Commits made so far by this process's connections (numbered by ``_count``)."""
        self._count_lock = threading.Lock()
        self._here: sqlite3.Connection | None = None
        """``write_now``'s connection: opened on, and used only by, the first caller's thread."""
        self._here_thread = 0
        self._synced = 0
        self._sync_lock = threading.Lock()
        self._wal_fd: int | None = None

    async def start(self) -> None:
        """Open the writer connection on its thread."""
        self._thread.start()
        self._syncer.start()
        await asyncio.wrap_future(self._ready)

    async def submit(
        self,
        work: Callable[[sqlite3.Connection], T],
        *,
        wakes: str | None = None,
        single_statement: bool = False,
        durable: bool = True,
        synced: bool = False,
    ) -> T:
        """Run ``work`` in a write transaction; return its result once committed.

        ``wakes`` names a conversation whose followers are woken after the commit.
        ``single_statement`` says ``work`` issues one statement, which then needs no
        explicit transaction when it is the only job queued. A caller cancelled before its job
        started writes nothing; one cancelled after it started unwinds only once the write is
        committed, so whatever the caller's cancellation reaches next (the runner answering a
        cut-off run's open actions) reads it. ``durable=False`` (budget holds) lets a batch
        of only such jobs commit without an fsync: visible to every process at once, lost only
        with the host, and made durable by the next durable commit (the WAL is sequential).
        ``durable=False, synced=True`` (a bill): committed without an fsync, so the writer
        goes on with the next jobs, and answered once the WAL is fsynced by the sync thread
        (shared by the bills committed meanwhile): as durable as ``sync()`` after the
        submit, in one hand-off instead of two.
        """
        if self._closed:
            raise BoundaryError("the SQLite store is closed")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put(_Job(work, future, wakes, single_statement, durable, synced))
        return await _answer(future)

    async def write_now(
        self, work: Callable[[sqlite3.Connection], T], *, synced: bool = False
    ) -> T:
        """``submit(work, durable=False, synced=synced)``, run on the calling thread when no
        connection holds the write lock: a short job (a few indexed statements) then costs
        no hand-off to the writer thread. A taken lock is never waited for here, so the
        event loop never blocks on another process: the job is queued to the writer instead.
        ``synced``: answered once the WAL is fsynced (by the sync thread, as a queued bill).
        """
        if self._closed:
            raise BoundaryError("the SQLite store is closed")
        conn = self._begun_here()
        if conn is None:
            return await self.submit(work, durable=False, synced=synced)
        try:
            result = work(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise unavailable(self._path, exc, self._busy_s) from exc
            raise
        commit = self._count()
        if not synced:
            return result
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        job = _Job(work, future, durable=False, synced=True, result=result, ran=True)
        self._to_sync.put((commit, [job]))
        return await _answer(future)  # cancelled, it unwinds once the bill is durable

    def _begun_here(self) -> sqlite3.Connection | None:
        """``write_now``'s connection inside a ``BEGIN IMMEDIATE``; None when the job must
        queue instead: the lock (or the file) is taken, or the caller is not the thread that
        opened the connection (a second event loop's, if there is one)."""
        conn = self._here_connection()
        if conn is None or self._here_thread != threading.get_ident():
            return None
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return None
        return conn

    def _here_connection(self) -> sqlite3.Connection | None:
        """``write_now``'s connection; None while it cannot be opened without waiting."""
        if self._here is None:
            # Busy at once rather than wait (the caller is the event loop); NORMAL: commits
            # are not fsynced here, the sync thread does that for the jobs that need it.
            try:
                conn = connect(self._path, busy_s=0.0)
            except StoreUnavailableError:
                return None
            try:
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error:
                conn.close()
                return None
            self._here = conn
            self._here_thread = threading.get_ident()
        return self._here

    def _count(self) -> int:
        """Number a commit just made (on the writer's or the calling thread): an fsync that
        starts after the number was taken covers it."""
        with self._count_lock:
            self._commits += 1
            return self._commits

    def _fsync(self, wanted: int) -> None:
        """Make commits up to number ``wanted`` durable (an fsync of the WAL outside the write
        lock: the writer goes on committing meanwhile, so a hold never waits for a bill's
        fsync)."""
        with self._sync_lock:
            if self._synced >= wanted:
                return
            started = self._commits
            try:
                if self._wal_fd is None:
                    self._wal_fd = os.open(f"{self._path}-wal", os.O_RDONLY)
                # The WAL holds every commit not yet checkpointed (a checkpoint syncs the
                # database file itself): synced, they survive a power loss as FULL's would.
                os.fsync(self._wal_fd)
            except OSError as exc:
                raise StoreUnavailableError(
                    f"the SQLite store at {self._path} could not sync its log ({exc}); "
                    f"{RESUME_HINT}"
                ) from exc
            self._synced = started

    async def close(self) -> None:
        """Finish queued jobs, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        self._to_sync.put(None)  # after the writer: every bill it handed over is synced first
        if self._syncer.is_alive():
            await asyncio.to_thread(self._syncer.join)
        with self._sync_lock:
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None
        if self._here is not None:
            self._here.close()
            self._here = None

    def _run(self) -> None:
        try:
            conn = connect(self._path, self._busy_s)
        except BaseException as exc:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                self._ready.set_exception(exc)
            return
        try:
            self._ready.set_result(None)
        except concurrent.futures.InvalidStateError:  # the opener was cancelled (Ctrl-C)
            conn.close()
            return
        try:
            stop = False
            while not stop:
                first = self._queue.get()
                if first is None:
                    break
                batch, stop = _drain(self._queue, first, _MAX_BATCH)
                self._commit(conn, batch)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        live = [job for job in batch if job.future.set_running_or_notify_cancel()]
        if not live:
            return
        self._sync(conn, any(job.durable for job in live))
        # A lone job needs no savepoint: if it fails, the whole transaction is rolled back.
        alone = len(live) == 1
        if alone and live[0].single_statement:
            self._autocommit(conn, live[0])
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in live:
                if not alone:
                    conn.execute("SAVEPOINT job")
                try:
                    job.result = job.work(conn)
                    job.ran = True
                except BaseException as exc:  # any: the caller's, never the thread's end
                    # One job's failure (a conflict, an unknown id) must not undo the others.
                    job.error = (
                        unavailable(self._path, exc, self._busy_s)
                        if isinstance(exc, sqlite3.Error)
                        else exc
                    )
                    if not alone:
                        conn.execute("ROLLBACK TO job")
                if not alone:
                    conn.execute("RELEASE job")
            conn.execute("ROLLBACK" if alone and not live[0].ran else "COMMIT")
            commit = self._count()
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            failure = unavailable(self._path, exc, self._busy_s)
            for job in live:
                job.future.set_exception(failure)
            return
        # A durable batch was fsynced by its commit; otherwise its bills wait for the sync.
        to_sync: list[_Job] = []
        for job in live:
            if job.error is not None:
                job.future.set_exception(job.error)
            elif job.synced and not self._durable:
                to_sync.append(job)
            else:
                job.future.set_result(job.result)
        if to_sync:
            self._to_sync.put((commit, to_sync))
        woken = {job.wakes for job in live if job.ran and job.wakes is not None}
        if woken:
            self._on_commit(woken)

    def _sync_loop(self) -> None:
        """Fsync the WAL for the bills the writer committed, then answer them (several per
        fsync when they were committed while the last one ran)."""
        stop = False
        while not stop:
            first = self._to_sync.get()
            if first is None:
                return
            handed, stop = _drain(self._to_sync, first)
            wanted = max(commits for commits, _ in handed)
            jobs = [job for _, bills in handed for job in bills]
            try:
                self._fsync(wanted)
            except Exception as exc:  # StoreUnavailableError: the bills are not durable
                for job in jobs:
                    job.future.set_exception(exc)
                continue
            for job in jobs:
                job.future.set_result(job.result)

    def _sync(self, conn: sqlite3.Connection, durable: bool) -> None:
        # Outside any transaction: the setting applies to the next commit.
        if durable != self._durable:
            conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._durable = durable

    def _autocommit(self, conn: sqlite3.Connection, job: _Job) -> None:
        # One statement is its own transaction, committed (and fsynced) when it returns.
        try:
            result = job.work(conn)
        except BaseException as exc:  # any: the caller's, never the writer thread's end
            if isinstance(exc, sqlite3.Error):
                exc = unavailable(self._path, exc, self._busy_s)
            job.future.set_exception(exc)
            return
        commit = self._count()
        if job.synced and not self._durable:
            job.result = result
            self._to_sync.put((commit, [job]))
        else:
            job.future.set_result(result)
        if job.wakes is not None:
            self._on_commit({job.wakes})


class SqliteReaders:
    """A small pool of reader threads, each with its own connection (WAL readers never block)."""

    def __init__(self, path: Path, size: int = 2, busy_s: float = BUSY_TIMEOUT_S) -> None:
        self._path = path
        self._busy_s = busy_s
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=size, thread_name_prefix="synthorg-sqlite-reader"
        )

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self._path, self._busy_s)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` with a reader connection on a pool thread."""
        loop = asyncio.get_running_loop()

        def call() -> T:
            try:
                return work(self._conn())
            except sqlite3.Error as exc:
                raise unavailable(self._path, exc, self._busy_s) from exc

        return await loop.run_in_executor(self._pool, call)

    async def close(self) -> None:
        """Stop the threads and close their connections."""
        await asyncio.to_thread(self._pool.shutdown, wait=True)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()


async def _answer[R](future: concurrent.futures.Future[R]) -> R:
    """A job's result once its future is answered. A caller cancelled before the job started
    writes nothing; one cancelled after it started (or, for a bill, once it is committed)
    unwinds only once the future is answered: committed, and durable when it must be."""
    done = asyncio.wrap_future(future)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        if not future.cancel():  # running or committed: let it finish before unwinding
            with contextlib.suppress(Exception):
                await asyncio.shield(done)
        raise


def _drain[Item](
    q: queue.SimpleQueue[Item | None], first: Item, limit: int | None = None
) -> tuple[list[Item], bool]:
    """``first`` and whatever else ``q`` holds now (up to ``limit`` items), and whether the
    stop sentinel (None) came among them: one batch for the writer or the sync thread."""
    items = [first]
    while limit is None or len(items) < limit:
        try:
            item = q.get_nowait()
        except queue.Empty:
            break
        if item is None:
            return items, True
        items.append(item)
    return items, False
