"""Live tail: wake-ups for subscribers and the read-from-the-database follow loop.

Correctness never depends on a wake-up: a follower always reads committed events with
``seq > last delivered`` from the database, so a wake-up only decides *when* to look. A
follower clears its wake-up flag before each read, so a commit that lands during the read
still wakes the next wait; a timed wait is the fallback for writers this process cannot hear
(another process on SQLite, a lost notification on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from synthorg.domain import StoredEvent
from synthorg.errors import NotFoundError

FetchAfter = Callable[[int, int], Awaitable[list[StoredEvent]]]
"""Read up to ``limit`` events with seq > ``after``: ``fetch(after, limit)``."""


class Waiter:
    """One subscriber's wake-up flag, settable from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self.waiting = False
        """In ``wait``: every commit from now on reaches this subscriber only by a wake-up."""

    def wake(self) -> None:
        """Set the flag (thread-safe); a closed loop means the subscriber is gone."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        """Forget earlier wake-ups; call before reading the database."""
        self._event.clear()

    async def wait(self, seconds: float) -> None:
        """Until woken or ``seconds`` pass."""
        self.waiting = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), seconds)
        finally:
            self.waiting = False


ANY = "*"
"""The id a change watcher is told when it cannot know which conversations changed."""


class ChangeWatcher(Waiter):
    """A wake-up flag plus the ids of the conversations that changed since the last take."""

    def __init__(self) -> None:
        super().__init__()
        self._ids: set[str] = set()

    def changed(self, conversation_id: str) -> None:
        """Note a change (thread-safe)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._note, conversation_id)

    def _note(self, conversation_id: str) -> None:
        self._ids.add(conversation_id)
        self._event.set()

    def take(self) -> set[str]:
        """The ids changed since the last take (``ANY`` among them: unknown which)."""
        ids, self._ids = self._ids, set()
        self._event.clear()
        return ids


class TailHub:
    """Who is following which conversation in this process, and who watches them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = {}
        self._watchers: set[ChangeWatcher] = set()

    @contextmanager
    def watch(self) -> Iterator[ChangeWatcher]:
        """A watcher told of every conversation's changes for the duration of the block."""
        watcher = ChangeWatcher()
        with self._lock:
            self._watchers.add(watcher)
        try:
            yield watcher
        finally:
            with self._lock:
                self._watchers.discard(watcher)

    @contextmanager
    def subscribe(self, conversation_id: str) -> Iterator[Waiter]:
        """Register a waiter for the duration of the block."""
        waiter = Waiter()
        with self._lock:
            self._waiters.setdefault(conversation_id, set()).add(waiter)
        try:
            yield waiter
        finally:
            with self._lock:
                group = self._waiters.get(conversation_id)
                if group is not None:
                    group.discard(waiter)
                    if not group:
                        del self._waiters[conversation_id]

    def notify(self, conversation_id: str) -> None:
        """Events of this conversation were committed (callable from any thread)."""
        with self._lock:
            waiters = tuple(self._waiters.get(conversation_id, ()))
        for waiter in waiters:
            waiter.wake()

    def changed(self, conversation_id: str) -> None:
        """The conversation's record was created, saved or deleted (callable from any thread):
        tells the watchers (events alone do not change what a listing shows)."""
        with self._lock:
            watchers = tuple(self._watchers)
        for watcher in watchers:
            watcher.changed(conversation_id)

    def notify_all(self) -> None:
        """Wake everyone (e.g. after a notification channel reconnected)."""
        with self._lock:
            waiters = tuple(w for group in self._waiters.values() for w in group)
            watchers = tuple(self._watchers)
        for waiter in waiters:
            waiter.wake()
        for watcher in watchers:
            watcher.changed(ANY)

    def waiting_count(self, conversation_id: str) -> int:
        """How many followers of the conversation wait for a wake-up (for tests)."""
        with self._lock:
            return sum(1 for w in self._waiters.get(conversation_id, ()) if w.waiting)

    def subscriber_count(self) -> int:
        """How many followers are registered (for metrics and tests)."""
        with self._lock:
            return sum(len(group) for group in self._waiters.values())


async def follow(
    fetch: FetchAfter,
    exists: Callable[[], Awaitable[bool]],
    waiter: Waiter,
    *,
    after: int,
    poll_interval: float,
    page: int = 500,
) -> AsyncIterator[StoredEvent]:
    """Every event with seq > ``after``, then live ones, each exactly once and in order.

    Ends when the conversation is deleted.
    """
    last = after
    while True:
        waiter.clear()
        batch = await fetch(last, page)
        for stored in batch:
            # Defensive: the query is already strictly after ``last``.
            if stored.seq > last:
                last = stored.seq
                yield stored
        if len(batch) < page:
            if not batch and not await exists():
                return
            await waiter.wait(poll_interval)


class LiveTail(ABC):
    """``tail()`` for a backend with a wake-up hub, an existence check and ``history()``.

    Backends differ only in how they hear of commits (in-process hub, LISTEN/NOTIFY, polling);
    the gap-free, duplicate-free reading is this one loop.
    """

    _hub: TailHub
    _poll_interval: float

    @abstractmethod
    async def _exists(self, conversation_id: str) -> bool:
        """Whether the conversation exists."""

    @abstractmethod
    async def history(
        self, conversation_id: str, *, after: int | None = None, limit: int = 100
    ) -> list[StoredEvent]:
        """Events with seq > after, in order."""

    def followers_waiting(self, conversation_id: str) -> int:
        """Followers of the conversation in this process that have read all and wait to be woken."""
        return self._hub.waiting_count(conversation_id)

    def watch_changes(self) -> AbstractContextManager[ChangeWatcher]:
        """Told of every conversation record created, saved (status, turns, usage) or deleted
        through this store (other processes' too on PostgreSQL; on SQLite only this
        process's). Appended events alone do not count: ``tail`` follows those."""
        return self._hub.watch()

    async def tail(self, conversation_id: str, *, after: int = 0) -> AsyncIterator[StoredEvent]:
        """Every event with seq > after, then live ones; ends if the conversation is deleted."""
        # Subscribed before the first read, so every commit after that read wakes us.
        with self._hub.subscribe(conversation_id) as waiter:
            if not await self._exists(conversation_id):
                raise NotFoundError(f"no conversation {conversation_id}")

            async def fetch(last: int, limit: int) -> list[StoredEvent]:
                return await self.history(conversation_id, after=last, limit=limit)

            async for stored in follow(
                fetch,
                lambda: self._exists(conversation_id),
                waiter,
                after=after,
                poll_interval=self._poll_interval,
            ):
                yield stored
