"""Real writer processes: live tail across processes, and SIGKILL mid-stream loses no ack."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest
from store_helpers import record, until

from synthorg.domain import MessageEvent, StoredEvent
from synthorg.store import Store, StoreConfig, open_store

WRITER = Path(__file__).with_name("store_writer_proc.py")


async def _spawn(
    url: str, cid: str, count: int, delay: float, writers: int
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WRITER),
        url,
        cid,
        str(count),
        str(delay),
        str(writers),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line == b"ready\n", line
    return proc


async def test_live_tail_follows_a_writer_in_another_process(store_url: str) -> None:
    follower = await open_store(StoreConfig(url=store_url, poll_interval_s=0.05))
    try:
        rec = record()
        await follower.create_conversation(rec)
        got: list[StoredEvent] = []
        subscribed = asyncio.Event()

        async def follow() -> None:
            stream = follower.tail(rec.id)
            subscribed.set()
            async for stored in stream:
                got.append(stored)
                if len(got) == 60:
                    return

        task = asyncio.create_task(follow())
        await subscribed.wait()
        proc = await _spawn(store_url, rec.id, 60, 0.002, 2)
        assert proc.stdout is not None
        out = await asyncio.wait_for(proc.stdout.read(), 60)
        assert await proc.wait() == 0
        await asyncio.wait_for(task, 30)
        acks = {int(line.split()[1]): line.split()[2] for line in out.decode().splitlines()[:-1]}
        assert [s.seq for s in got] == list(range(1, 61))
        assert {s.seq: s.event.text for s in got} == acks  # type: ignore[union-attr]
    finally:
        await follower.close()


@pytest.mark.slow
async def test_sigkill_mid_stream_loses_no_acknowledged_event(store_url: str) -> None:
    setup = await open_store(store_url)
    rec = record()
    await setup.create_conversation(rec)
    await setup.close()

    proc = await _spawn(store_url, rec.id, 0, 0.0, 4)
    assert proc.stdout is not None
    acked: dict[int, str] = {}
    while len(acked) < 300:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        _, seq, text = line.decode().split()
        acked[int(seq)] = text
    proc.send_signal(signal.SIGKILL)
    # lines already written before the kill are acknowledgements too
    for line in (await proc.stdout.read()).decode().splitlines():
        parts = line.split()
        if len(parts) == 3:
            acked[int(parts[1])] = parts[2]
    assert await proc.wait() == -signal.SIGKILL

    store: Store = await open_store(store_url)
    try:
        last = await store.last_seq(rec.id)
        history = await store.history(rec.id, limit=1_000_000)
        # every acknowledged event is there with its content, and the log has no holes
        saved = {s.seq: s.event for s in history}
        assert len(acked) >= 300
        for seq, text in acked.items():
            assert saved[seq] == MessageEvent(role="user", text=text)
        assert [s.seq for s in history] == list(range(1, last + 1))
        assert last >= max(acked)
        # the log continues where it stopped
        assert (await store.append(rec.id, MessageEvent(role="user", text="after"))).seq == last + 1
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_followers_are_woken_by_notify_not_polling(pg_schema_url: str) -> None:
    """With polling effectively off, another process's appends still arrive promptly."""
    from synthorg.store.postgres import PostgresStore

    follower = await PostgresStore.open(pg_schema_url, poll_interval=600)
    try:
        rec = record()
        await follower.create_conversation(rec)
        stream = follower.tail(rec.id)
        first = asyncio.ensure_future(anext(stream))
        # The follower has read the (empty) history and waits: from here on, with polling at
        # 600 s, only a NOTIFY can bring it the other process's appends.
        await until(lambda: follower.followers_waiting(rec.id) == 1)
        proc = await _spawn(pg_schema_url, rec.id, 5, 0.05, 1)
        got = [await asyncio.wait_for(first, 10)]
        while len(got) < 5:
            got.append(await asyncio.wait_for(anext(stream), 10))
        assert [s.seq for s in got] == [1, 2, 3, 4, 5]
        assert await proc.wait() == 0
        await stream.aclose()
    finally:
        await follower.close()
