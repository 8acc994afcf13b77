"""One row shape for forge deliveries on both backends: only the payload's and the
timestamps' decoding differ (JSON text and ISO text on SQLite, jsonb and timestamptz on
PostgreSQL), and each backend's row decodes to the same record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from synthorg.store import codec, forge_codec
from synthorg.store.protocol import DeliveryRecord, DeliveryState

_AT = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)
_RECORD = DeliveryRecord(
    delivery_id="d-1",
    project_id="web",
    event="issues.labeled",
    state=DeliveryState.STARTED,
    outcome="run started for issue #3",
    issue=3,
    conversation_id="c-1",
    payload={"issue": {"number": 3, "title": "<b>x</b>"}},
    received_at=_AT,
    updated_at=_AT + timedelta(seconds=5),
)


def test_each_backends_row_decodes_to_the_same_record() -> None:
    sqlite_row = forge_codec.delivery_values(_RECORD, payload=json.dumps, ts=codec.ts_text)
    assert isinstance(sqlite_row[7], str) and isinstance(sqlite_row[8], str)
    from_sqlite = forge_codec.delivery(sqlite_row, payload=json.loads, ts=codec.parse_ts)
    # PostgreSQL hands back a dict and an aware datetime, in the session's time zone.
    cest = timezone(timedelta(hours=2))
    pg_row = (*sqlite_row[:7], dict(_RECORD.payload), _AT.astimezone(cest), _RECORD.updated_at)
    from_pg = forge_codec.delivery(pg_row, payload=dict, ts=codec.utc)
    assert from_sqlite == from_pg == _RECORD
    assert from_pg.received_at.tzinfo is UTC


def test_the_columns_name_every_value_in_order() -> None:
    names = [c.strip() for c in forge_codec.DELIVERY_COLUMNS.split(",")]
    values = forge_codec.delivery_values(_RECORD, payload=json.dumps, ts=codec.ts_text)
    assert len(names) == len(values) == len(DeliveryRecord.model_fields)
    assert names == list(DeliveryRecord.model_fields)
