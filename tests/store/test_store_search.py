"""Task-text search in the store (both backends): the whole table, not one page, with the
cursor paging and the other filters intact."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from store_helpers import record, uid

from synthorg.domain import ConversationRecord, ConversationStatus, Task
from synthorg.errors import UsageError
from synthorg.store import Store

MANY = 10_000
EVERY = 1_000


def _with_prompt(
    project: str, prompt: str, moment: datetime, **fields: object
) -> ConversationRecord:
    task = Task(id=uid("t"), project_id=project, prompt=prompt, repository="/r")
    return record(project_id=project, created_at=moment, task=task, **fields)


async def _create_all(store: Store, records: list[ConversationRecord]) -> None:
    for start in range(0, len(records), 500):
        await asyncio.gather(*(store.create_conversation(r) for r in records[start : start + 500]))


async def test_search_finds_matches_among_10000_and_pages_them(store: Store) -> None:
    project = uid("p")
    base = datetime(2031, 1, 1, tzinfo=UTC)
    records = []
    for i in range(MANY):
        hit = i % EVERY == 7
        prompt = f"Refactor the Needle-Parser, part {i}" if hit else f"routine chore {i}"
        status = ConversationStatus.FINISHED if hit and i % 2 else ConversationStatus.CREATED
        records.append(_with_prompt(project, prompt, base + timedelta(seconds=i), status=status))
    await _create_all(store, records)
    hits = [r for r in records if "Needle" in r.task.prompt]
    newest_first = [r.id for r in sorted(hits, key=lambda r: r.created_at, reverse=True)]

    # The oldest match is far past the first pages of the unfiltered list.
    first = await store.list_conversations(project_id=project, limit=50)
    assert hits[0].id not in {r.id for r in first.items}

    seen: list[str] = []
    page = await store.list_conversations(project_id=project, search="needle-parser", limit=3)
    seen += [r.id for r in page.items]
    while page.next_cursor is not None:
        page = await store.list_conversations(
            project_id=project, search="needle-parser", limit=3, cursor=page.next_cursor
        )
        seen += [r.id for r in page.items]
    assert seen == newest_first  # ASCII case folded, every match once, newest first
    assert await store.count_conversations(project_id=project, search="NEEDLE") == len(hits)

    finished = await store.list_conversations(
        project_id=project, search="needle", status=ConversationStatus.FINISHED
    )
    assert {r.id for r in finished.items} == {
        r.id for r in hits if r.status is ConversationStatus.FINISHED
    }
    assert await store.count_conversations(project_id=project, search="no such text") == 0


async def test_search_text_is_literal_not_a_pattern(store: Store) -> None:
    project = uid("p")
    moment = datetime(2032, 1, 1, tzinfo=UTC)
    literal = _with_prompt(project, 'ship 100%_done\'s "quoted" \\ path', moment)
    other = _with_prompt(project, "ship 1000 done", moment + timedelta(seconds=1))
    await _create_all(store, [literal, other])
    for needle in ("%", "_", "0%_d", "'s \"q", "\\ p"):
        page = await store.list_conversations(project_id=project, search=needle)
        assert [r.id for r in page.items] == [literal.id], needle
    assert await store.count_conversations(project_id=project, search="ship") == 2


@pytest.mark.parametrize("bad", ["x" * 201, "a\x00b"])
async def test_search_refuses_overlong_or_nul_text(store: Store, bad: str) -> None:
    with pytest.raises(UsageError):
        await store.list_conversations(search=bad)
    with pytest.raises(UsageError):
        await store.count_conversations(search=bad)
