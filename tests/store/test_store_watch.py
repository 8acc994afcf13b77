"""Change watchers (what the conversation list's push rides on), on both backends: told of
records created, saved, transitioned and deleted, not of events appended alone; on
PostgreSQL also of another process's changes."""

from __future__ import annotations

import asyncio

import pytest
from store_helpers import message, record

from synthorg.domain import ConversationStatus, StatusChangeEvent
from synthorg.store import Store, open_store
from synthorg.store.tail import ChangeWatcher

DEADLINE_S = 30.0


async def _until(watcher: ChangeWatcher, wanted: str) -> set[str]:
    """Every id the watcher is told of, up to and including ``wanted`` (bounded)."""
    seen: set[str] = set()
    async with asyncio.timeout(DEADLINE_S):
        while wanted not in seen:
            await watcher.wait(DEADLINE_S)
            seen |= watcher.take()
    return seen


async def _exercise(writer: Store, watcher: ChangeWatcher) -> None:
    quiet, marker = record(), record()
    await writer.create_conversation(quiet)
    assert quiet.id in await _until(watcher, quiet.id)

    # An appended event alone changes nothing a listing shows: no word of it.
    await writer.append(quiet.id, message(1))
    await writer.create_conversation(marker)
    assert quiet.id not in await _until(watcher, marker.id)

    running = quiet.model_copy(update={"status": ConversationStatus.RUNNING})
    await writer.save_conversation(running)
    assert quiet.id in await _until(watcher, quiet.id)
    done = running.model_copy(update={"status": ConversationStatus.FINISHED})
    await writer.transition(
        done, StatusChangeEvent(old=ConversationStatus.RUNNING, new=ConversationStatus.FINISHED)
    )
    assert quiet.id in await _until(watcher, quiet.id)
    await writer.delete_conversation(quiet.id)
    assert quiet.id in await _until(watcher, quiet.id)


async def test_a_watcher_is_told_of_record_changes_only(store: Store) -> None:
    with store.watch_changes() as watcher:
        await _exercise(store, watcher)


@pytest.mark.postgres
async def test_postgres_watchers_hear_other_processes(pg_schema_url: str) -> None:
    """Two stores on one database stand for two processes (SQLite has no cross-process
    notification: docs/server.md), so this runs on PostgreSQL only, by its fixture."""
    here, other = await open_store(pg_schema_url), await open_store(pg_schema_url)
    try:
        with here.watch_changes() as watcher:
            await _exercise(other, watcher)
    finally:
        await other.close()
        await here.close()
