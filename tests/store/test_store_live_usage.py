"""The record's live totals on both backends (a turn moves them in the same write that logs
it: exact Decimal sums, none lost under concurrent appends), and ``since`` bounds of any year."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from store_helpers import record

from synthorg.domain import ActionEvent, MessageEvent, ObservationEvent, TokenUsage
from synthorg.store import Store


def _turn(i: int, cost: str) -> ActionEvent:
    return ActionEvent(
        action_id=f"act-{i}",
        tool_name="terminal",
        arguments={"command": "true"},
        usage=TokenUsage(tokens_in=100 + i, tokens_out=10, cost_usd=Decimal(cost)),
    )


async def test_each_turn_moves_the_record_totals(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    await store.append(rec.id, _turn(1, "0.0012"))
    await store.append(rec.id, ObservationEvent(action_id="act-1", content="ok"))
    await store.append(
        rec.id,
        MessageEvent(
            role="assistant",
            text="done",
            usage=TokenUsage(tokens_in=7, tokens_out=3, cost_usd=Decimal("0.0007")),
        ),
    )
    got = await store.get_conversation(rec.id)
    assert got.turns == 2
    assert got.usage == TokenUsage(tokens_in=108, tokens_out=13, cost_usd=Decimal("0.0019"))
    # Everything else in the record is as it was saved.
    assert got.model_copy(update={"turns": 0, "usage": TokenUsage()}) == rec


async def test_concurrent_turns_are_all_counted_exactly(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    await asyncio.gather(*(store.append(rec.id, _turn(i, "0.1")) for i in range(40)))
    got = await store.get_conversation(rec.id)
    assert got.turns == 40
    assert got.usage.cost_usd == Decimal("4.0")  # exact: 40 x 0.1 in floating point is not
    assert got.usage.tokens_in == sum(100 + i for i in range(40))
    page = await store.list_conversations(limit=10)
    listed = next(c for c in page.items if c.id == rec.id)
    assert listed.turns == 40 and listed.usage == got.usage


async def test_since_before_year_1000_or_out_of_utc_range(store: Store) -> None:
    """``since`` is a time bound on both backends whatever its year or offset (it was a 500
    for 0001-01-01T00:00+01:00, and none of the events for year 999 on SQLite)."""
    from datetime import UTC, datetime, timedelta, timezone

    rec = record()
    await store.create_conversation(rec)
    for n in range(3):
        await store.append(rec.id, ObservationEvent(action_id=f"act-{n}", content="x"))
    early = [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
        datetime(999, 1, 1, tzinfo=UTC),
    ]
    for since in early:
        assert len(await store.history(rec.id, since=since)) == 3, since
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-1)))
    assert await store.history(rec.id, since=late) == []
