"""Live tail: history then live events, exactly once and in order, on both backends."""

from __future__ import annotations

import asyncio

import pytest
from store_helpers import message, record, uid, until

from synthorg.domain import StoredEvent
from synthorg.errors import NotFoundError
from synthorg.store import Store, open_store


async def _take(stream: object, count: int, timeout: float = 10) -> list[StoredEvent]:
    out: list[StoredEvent] = []

    async def run() -> None:
        async for stored in stream:  # type: ignore[attr-defined]
            out.append(stored)
            if len(out) == count:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_tail_replays_then_follows(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    for i in range(5):
        await store.append(rec.id, message(i))
    stream = store.tail(rec.id, after=2)
    first = await _take(stream, 3)
    assert [s.seq for s in first] == [3, 4, 5]

    reader = asyncio.create_task(_take(stream, 4))
    # The follower has read all and waits: what follows can only reach it live.
    await until(lambda: store.followers_waiting(rec.id) == 1)  # type: ignore[attr-defined]
    for i in range(5, 9):
        await store.append(rec.id, message(i))
    live = await reader
    assert [s.seq for s in live] == [6, 7, 8, 9]
    assert [s.event for s in live] == [message(i) for i in range(5, 9)]
    await stream.aclose()  # type: ignore[attr-defined]


async def test_tail_of_unknown_conversation_fails(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await anext(aiter(store.tail(uid())))


async def test_tail_ends_when_the_conversation_is_deleted(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    await store.append(rec.id, message(0))
    got: list[int] = []

    async def follow() -> None:
        async for stored in store.tail(rec.id):
            got.append(stored.seq)

    task = asyncio.create_task(follow())
    await until(lambda: got == [1])  # the follower is past the history and following
    await store.delete_conversation(rec.id)
    await asyncio.wait_for(task, 10)
    assert got == [1]


async def test_tail_sees_another_store_instance(store_url: str, store: Store) -> None:
    """A writer on a separate connection set (as another process would be) is followed."""
    rec = record()
    await store.create_conversation(rec)
    other = await open_store(store_url)
    try:
        stream = store.tail(rec.id)
        reader = asyncio.create_task(_take(stream, 3))
        # The follower waits on an empty log: the other instance's appends reach it live.
        await until(lambda: store.followers_waiting(rec.id) == 1)  # type: ignore[attr-defined]
        for i in range(3):
            await other.append(rec.id, message(i))
        got = await reader
        assert [s.seq for s in got] == [1, 2, 3]
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await other.close()
