"""Forge deliveries in the store: kept once per delivery id, queued then settled, on both
backends and across reopening the store (a redelivery after a restart is still a duplicate)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from synthorg.store import Store, open_store
from synthorg.store.protocol import DeliveryRecord, DeliveryState
from tests.store.store_helpers import record, uid


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


def _started(delivery_id: str, conversation: str, event: str, project: str) -> DeliveryRecord:
    at = datetime.now(UTC)
    return DeliveryRecord(
        delivery_id=delivery_id,
        project_id=project,
        event=event,
        state=DeliveryState.STARTED,
        issue=4,
        conversation_id=conversation,
        payload={},
        received_at=at,
        updated_at=at,
    )


async def test_conversations_filter_by_the_forge_events_that_drove_them(store: Store) -> None:
    project = uid("p")
    labelled, reviewed, manual = uid(), uid(), uid()
    for conversation in (labelled, reviewed, manual):
        await store.create_conversation(record(conversation, project_id=project))
    await store.record_delivery(_started(uid("d"), labelled, "issues.labeled", project))
    await store.record_delivery(_started(uid("d"), reviewed, "issue_comment.created", project))
    await store.record_delivery(
        _started(uid("d"), reviewed, "pull_request_review.submitted", project)
    )
    refused = _started(uid("d"), manual, "issues.labeled", project)
    await store.record_delivery(refused.model_copy(update={"state": DeliveryState.REFUSED}))

    async def listed(*events: str) -> set[str]:
        page = await store.list_conversations(project_id=project, forge_events=events)
        count = await store.count_conversations(project_id=project, forge_events=events)
        assert count == len(page.items)
        return {r.id for r in page.items}

    assert await listed("issues.labeled") == {labelled}  # a refused delivery drove nothing
    assert await listed("pull_request_review.submitted", "x.y") == {reviewed}
    assert await listed("issues.labeled", "issue_comment.created") == {labelled, reviewed}
    assert await listed() == {labelled, reviewed, manual}  # no events: no forge filter


async def test_a_conversations_deliveries_and_its_pull_request(store: Store) -> None:
    conversation = uid()
    first = _started(uid("d"), conversation, "issues.labeled", "web")
    await store.record_delivery(first)
    await store.record_delivery(_started(uid("d"), uid(), "issues.labeled", "web"))
    assert [d.delivery_id for d in await store.conversation_deliveries(conversation)] == [
        first.delivery_id
    ]
    assert await store.conversation_pull(conversation) is None
    await store.record_pull(conversation, "web", 12, "https://github.com/acme/web/pull/12")
    await store.record_pull(conversation, "web", 13, "https://github.com/acme/web/pull/13")
    pull = await store.conversation_pull(conversation)
    assert pull is not None and (pull.number, pull.html_url) == (
        13,
        "https://github.com/acme/web/pull/13",
    )
