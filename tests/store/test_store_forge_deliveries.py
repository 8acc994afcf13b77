"""Forge deliveries in the store: kept once per delivery id, queued then settled, on both
backends and across reopening the store (a redelivery after a restart is still a duplicate)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from synthorg.store import Store, open_store
from synthorg.store.protocol import DeliveryRecord, DeliveryState


def _delivery(delivery_id: str, *, issue: int = 1, minutes: int = 0) -> DeliveryRecord:
    at = datetime(2026, 12, 2, 7, 0, tzinfo=UTC) + timedelta(minutes=minutes)
    return DeliveryRecord(
        delivery_id=delivery_id,
        project_id="web",
        event="issues.labeled",
        state=DeliveryState.QUEUED,
        issue=issue,
        payload={"action": "labeled", "issue": {"number": issue}},
        received_at=at,
        updated_at=at,
    )


async def test_a_delivery_is_kept_once_even_after_reopening(store: Store, store_url: str) -> None:
    first = _delivery("d-1")
    assert await store.record_delivery(first) is True
    assert await store.record_delivery(first) is False
    reopened = await open_store(store_url)
    try:
        assert await reopened.record_delivery(first) is False
        [queued] = [d for d in await reopened.queued_deliveries(10) if d.delivery_id == "d-1"]
    finally:
        await reopened.close()
    assert queued.payload == first.payload and queued.received_at == first.received_at


async def test_settled_deliveries_leave_the_queue_and_name_their_conversation(
    store: Store,
) -> None:
    await store.record_delivery(_delivery("d-2", issue=7, minutes=1))
    await store.record_delivery(_delivery("d-3", issue=7, minutes=2))
    await store.settle_delivery("d-2", DeliveryState.STARTED, "run started", conversation_id="c-1")
    queued = {d.delivery_id for d in await store.queued_deliveries(100)}
    assert "d-2" not in queued and "d-3" in queued
    assert await store.issue_conversation("web", 7) == "c-1"
    assert await store.issue_conversation("web", 8) is None
    assert await store.issue_conversation("other", 7) is None
    await store.settle_delivery("d-3", DeliveryState.REFUSED, "cap")
    recent = await store.recent_deliveries(2, project_id="web")
    assert [(d.delivery_id, d.state, d.outcome) for d in recent] == [
        ("d-3", DeliveryState.REFUSED, "cap"),
        ("d-2", DeliveryState.STARTED, "run started"),
    ]
    assert await store.recent_deliveries(5, project_id="nobody") == []
