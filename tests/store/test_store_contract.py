"""The store contract: conversations, the event log and history pages, on both backends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from store_helpers import message, record, stamps, uid

from synthorg.domain import (
    ActionEvent,
    ConversationStatus,
    MessageEvent,
    ObservationEvent,
    StatusChangeEvent,
    StoredEvent,
)
from synthorg.errors import ConflictError, NotFoundError, UsageError
from synthorg.store import Store


async def test_create_get_save_roundtrip(store: Store) -> None:
    rec = record(labels={"team": "a"})
    await store.create_conversation(rec)
    assert await store.get_conversation(rec.id) == rec
    changed = rec.model_copy(update={"status": ConversationStatus.RUNNING, "runs": 1})
    await store.save_conversation(changed)
    assert await store.get_conversation(rec.id) == changed


async def test_create_twice_conflicts_and_unknown_ids_are_not_found(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    with pytest.raises(ConflictError):
        await store.create_conversation(rec)
    missing = uid()
    with pytest.raises(NotFoundError):
        await store.get_conversation(missing)
    with pytest.raises(NotFoundError):
        await store.save_conversation(record(missing))
    with pytest.raises(NotFoundError):
        await store.delete_conversation(missing)
    with pytest.raises(NotFoundError):
        await store.append(missing, message(1))
    with pytest.raises(NotFoundError):
        await store.last_seq(missing)


async def test_append_numbers_from_one_per_conversation(store: Store) -> None:
    a, b = record(), record()
    await store.create_conversation(a)
    await store.create_conversation(b)
    assert await store.last_seq(a.id) == 0
    acked = [await store.append(a.id, message(i)) for i in range(5)]
    seqs_a = [s.seq for s in acked]
    seqs_b = [(await store.append(b.id, message(i))).seq for i in range(3)]
    assert seqs_a == [1, 2, 3, 4, 5]
    assert seqs_b == [1, 2, 3]
    assert await store.last_seq(a.id) == 5
    stored = await store.history(a.id)
    assert [s.event for s in stored] == [message(i) for i in range(5)]
    assert all(s.conversation_id == a.id for s in stored)
    assert [s.timestamp for s in stored] == sorted(s.timestamp for s in stored)
    # what history reads back is exactly what append acknowledged, and a valid model
    assert stored == acked
    assert [StoredEvent.model_validate(s.model_dump()) for s in stored] == acked
    assert all(s.timestamp.utcoffset() == timedelta(0) for s in stored)


async def test_concurrent_appends_get_distinct_consecutive_seqs(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    results = await asyncio.gather(*(store.append(rec.id, message(i)) for i in range(200)))
    assert sorted(r.seq for r in results) == list(range(1, 201))
    history = await store.history(rec.id, limit=1000)
    assert [s.seq for s in history] == list(range(1, 201))
    by_seq = {r.seq: r.event for r in results}
    assert all(by_seq[s.seq] == s.event for s in history)


async def test_a_failing_append_does_not_disturb_concurrent_ones(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    outcomes = await asyncio.gather(
        *(store.append(rec.id if i % 3 else uid(), message(i)) for i in range(30)),
        return_exceptions=True,
    )
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 10
    assert all(isinstance(f, NotFoundError) for f in failures)
    assert [s.seq for s in await store.history(rec.id)] == list(range(1, 21))


async def test_delete_removes_events(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    await store.append(rec.id, message(1))
    await store.delete_conversation(rec.id)
    assert await store.history(rec.id) == []
    with pytest.raises(NotFoundError):
        await store.get_conversation(rec.id)
    await store.create_conversation(rec)  # the id is free again, numbering restarts
    assert (await store.append(rec.id, message(2))).seq == 1


async def test_history_pages(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    for i in range(1, 21):
        event = (
            ActionEvent(kind="action", action_id=f"a{i}", tool_name="terminal")
            if i % 2
            else message(i)
        )
        await store.append(rec.id, event)
    seqs = lambda page: [s.seq for s in page]  # noqa: E731
    assert seqs(await store.history(rec.id, limit=5)) == [1, 2, 3, 4, 5]
    assert seqs(await store.history(rec.id, after=5, limit=5)) == [6, 7, 8, 9, 10]
    assert seqs(await store.history(rec.id, after=18)) == [19, 20]
    # before alone gives the page just before it, still in ascending order
    assert seqs(await store.history(rec.id, before=11, limit=3)) == [8, 9, 10]
    assert seqs(await store.history(rec.id, after=3, before=7)) == [4, 5, 6]
    assert seqs(await store.history(rec.id, after=3, before=20, limit=2)) == [4, 5]
    actions = await store.history(rec.id, kinds=frozenset({"action"}), limit=3)
    assert seqs(actions) == [1, 3, 5]
    assert all(s.event.kind == "action" for s in actions)
    assert await store.history(rec.id, kinds=frozenset({"finished"})) == []
    assert await store.history(rec.id, after=20) == []
    with pytest.raises(UsageError):
        await store.history(rec.id, limit=0)


async def test_history_since_timestamp(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    first = [await store.append(rec.id, message(i)) for i in range(3)]
    await asyncio.sleep(0.02)
    cut = datetime.now(UTC)
    await asyncio.sleep(0.02)
    later = [await store.append(rec.id, message(i)) for i in range(3, 6)]
    got = await store.history(rec.id, since=cut)
    assert [s.seq for s in got] == [s.seq for s in later]
    assert first[-1].timestamp < cut
    assert await store.history(rec.id, since=cut + timedelta(days=1)) == []


async def test_list_filters_and_count(store: Store) -> None:
    project = uid("p")
    running = record(project_id=project, status=ConversationStatus.RUNNING)
    done = record(project_id=project, status=ConversationStatus.FINISHED)
    other = record(project_id=uid("p"), status=ConversationStatus.RUNNING)
    for rec in (running, done, other):
        await store.create_conversation(rec)
    page = await store.list_conversations(project_id=project)
    assert {r.id for r in page.items} == {running.id, done.id}
    assert page.next_cursor is None
    page = await store.list_conversations(project_id=project, status=ConversationStatus.RUNNING)
    assert [r.id for r in page.items] == [running.id]
    assert await store.count_conversations(project_id=project) == 2
    assert (
        await store.count_conversations(project_id=project, status=ConversationStatus.FINISHED) == 1
    )
    total = await store.count_conversations()
    assert total >= 3
    assert await store.count_conversations(status=ConversationStatus.RUNNING) >= 2


async def test_list_cursor_pages_are_stable_under_inserts(store: Store) -> None:
    project = uid("p")
    base = datetime(2030, 1, 1, tzinfo=UTC)
    created = [record(project_id=project, created_at=t) for t in stamps(base, 7)]
    # two share a timestamp: the id breaks the tie, so the order is still total
    created.append(record(project_id=project, created_at=created[3].created_at))
    for rec in created:
        await store.create_conversation(rec)
    expected = [r.id for r in sorted(created, key=lambda r: (r.created_at, r.id), reverse=True)]
    seen: list[str] = []
    page = await store.list_conversations(project_id=project, limit=3)
    seen += [r.id for r in page.items]
    # newer conversations arriving between pages do not shift or repeat later pages
    for t in stamps(base + timedelta(days=1), 3):
        await store.create_conversation(record(project_id=project, created_at=t))
    while page.next_cursor is not None:
        page = await store.list_conversations(project_id=project, limit=3, cursor=page.next_cursor)
        seen += [r.id for r in page.items]
    assert seen == expected
    with pytest.raises(UsageError):
        await store.list_conversations(cursor="not a cursor!")


async def test_events_round_trip_every_field(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    events = [
        ActionEvent(
            kind="action",
            action_id="x1",
            tool_name="terminal",
            arguments={"cmd": "ls", "n": [1, 2]},
        ),
        ObservationEvent(action_id="x1", content="out\n\u00e9", exit_code=0),
        StatusChangeEvent(old=None, new=ConversationStatus.RUNNING, reason="start"),
        MessageEvent(role="assistant", text="x" * 30_000),
    ]
    for event in events:
        await store.append(rec.id, event)
    assert [s.event for s in await store.history(rec.id)] == events


async def test_backends_satisfy_the_protocols(store: Store) -> None:
    from synthorg.store import ConversationStore, LedgerStore

    assert isinstance(store, ConversationStore)
    assert isinstance(store, LedgerStore)
