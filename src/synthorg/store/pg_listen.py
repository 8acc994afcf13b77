"""The PostgreSQL LISTEN connection that wakes this process's followers on others' appends."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg

from synthorg.store.tail import TailHub

CHANNEL = "synthorg_events"
"""Notification channel; the payload is the conversation id."""

_RECONNECT_DELAY = 0.5


class Listener:
    """One dedicated connection listening on :data:`CHANNEL`, reconnecting when it drops.

    After every (re)connect all followers are woken: whatever was notified while the
    connection was down is then read from the table.
    """

    def __init__(self, url: str, hub: TailHub) -> None:
        self._url = url
        self._hub = hub
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def start(self) -> None:
        """Start listening; returns once the LISTEN is in place."""
        self._task = asyncio.create_task(self._run(), name="synthorg-pg-listener")
        waiter = asyncio.create_task(self._listening.wait())
        done, _ = await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            self._task.result()  # the listener died before listening: raise its error

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _run(self) -> None:
        first = True
        while True:
            try:
                self._conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
                await self._conn.execute(f"LISTEN {CHANNEL}")
                self._listening.set()
                self._hub.notify_all()
                async for note in self._conn.notifies():
                    self._hub.notify(note.payload)
            except psycopg.OperationalError:
                if first and not self._listening.is_set():
                    raise
            finally:
                if self._conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        await self._conn.close()
                    self._conn = None
            first = False
            await asyncio.sleep(_RECONNECT_DELAY)
