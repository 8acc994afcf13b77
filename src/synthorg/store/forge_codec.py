"""Forge delivery and pull request rows, shared by both backends: they differ only in how the
payload and the timestamps are stored (JSON text and ISO text on SQLite, jsonb and timestamptz
on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from synthorg.store.protocol import DeliveryRecord, DeliveryState, ForgePull

DELIVERY_COLUMNS = (
    "delivery_id, project_id, event, state, outcome, issue, conversation_id, payload,"
    " received_at, updated_at"
)
"""The columns of ``forge_deliveries`` in the order of ``delivery_values`` and ``delivery``."""


def delivery_values(
    record: DeliveryRecord,
    *,
    payload: Callable[[dict[str, Any]], Any],
    ts: Callable[[datetime], Any],
) -> tuple[Any, ...]:
    """The row of ``record`` (``payload`` and ``ts`` encode for the backend)."""
    return (
        record.delivery_id,
        record.project_id,
        record.event,
        record.state.value,
        record.outcome,
        record.issue,
        record.conversation_id,
        payload(record.payload),
        ts(record.received_at),
        ts(record.updated_at),
    )


def delivery(
    row: Sequence[Any],
    *,
    payload: Callable[[Any], dict[str, Any]],
    ts: Callable[[Any], datetime],
) -> DeliveryRecord:
    """The record of a ``DELIVERY_COLUMNS`` row (``payload`` and ``ts`` decode the backend's)."""
    return DeliveryRecord(
        delivery_id=row[0],
        project_id=row[1],
        event=row[2],
        state=DeliveryState(row[3]),
        outcome=row[4],
        issue=row[5],
        conversation_id=row[6],
        payload=payload(row[7]),
        received_at=ts(row[8]),
        updated_at=ts(row[9]),
    )


PULL_COLUMNS = "conversation_id, project_id, number, html_url, updated_at"
"""The columns of ``forge_pulls`` in the order ``pull`` reads."""


def pull(row: Sequence[Any], *, ts: Callable[[Any], datetime]) -> ForgePull:
    """The pull request of a ``PULL_COLUMNS`` row."""
    return ForgePull(
        conversation_id=row[0],
        project_id=row[1],
        number=int(row[2]),
        html_url=row[3],
        updated_at=ts(row[4]),
    )
