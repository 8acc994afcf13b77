"""Translation between domain models and database rows, shared by both backends."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from pydantic import TypeAdapter

from synthorg.domain import (
    ConversationEvent,
    ConversationRecord,
    ConversationStatus,
    StatusChangeEvent,
    StoredEvent,
)
from synthorg.domain.events import EVENT_ADAPTER
from synthorg.errors import UsageError
from synthorg.store.protocol import ConversationPage, ExecutionStatus, ExecutionUsage, RunOwner
from synthorg.store.secrets import REDACTED, SecretCipher, open_secrets, seal_secrets

RESTART_OBSERVATION = (
    "the process running this conversation died while this tool was in progress; "
    "its effect is unknown: check the workspace before repeating it"
)
NEVER_RAN_OBSERVATION = (
    "the process running this conversation died while this action was awaiting approval; "
    "it never ran"
)


def check_transition(record: ConversationRecord, event: StatusChangeEvent) -> None:
    """A transition is in the table (``ConversationStatus.may_become``) and its record and
    event say the same new status: every status write of both stores passes here."""
    if event.old is not None and not event.old.may_become(event.new):
        raise UsageError(
            f"transition of {record.id}: {event.old.value} may not become {event.new.value}"
        )
    if record.status is not event.new:
        raise UsageError(
            f"transition of {record.id}: the record says {record.status.value}, "
            f"the event {event.new.value}"
        )


SEARCH_MAX_CHARS = 200
"""Longest task-text search a listing accepts."""

_TASK_CONTAINS = {
    # instr/strpos rather than LIKE: the needle is plain text, no wildcard can be smuggled in.
    "?": "instr(lower(json_extract(state, '$.task.prompt')), lower(?)) > 0",
    "%s": "strpos(lower(state->'task'->>'prompt'), lower(%s)) > 0",
}


def filters(
    status: ConversationStatus | None,
    project_id: str | None,
    *,
    mark: str,
    true: str,
    search: str | None = None,
    forge_events: Sequence[str] = (),
) -> tuple[str, list[Any]]:
    """The WHERE clause of a conversation listing (``mark`` is the backend's placeholder,
    ``true`` its literal for "no filter") and its parameters. ``search`` keeps the
    conversations whose task text contains it (ASCII letters case-insensitively);
    ``forge_events`` those a started forge delivery of one of these events drove."""
    clauses: list[str] = []
    params: list[Any] = []
    if status is not None:
        clauses.append(f"status = {mark}")
        params.append(status.value)
    if project_id is not None:
        clauses.append(f"project_id = {mark}")
        params.append(project_id)
    if search:
        if len(search) > SEARCH_MAX_CHARS or "\x00" in search:
            raise UsageError(f"search must be at most {SEARCH_MAX_CHARS} characters, without NUL")
        clauses.append(_TASK_CONTAINS[mark])
        params.append(search)
    if forge_events:
        marks = ", ".join(mark for _ in forge_events)
        clauses.append(
            "id IN (SELECT conversation_id FROM forge_deliveries"  # noqa: S608 (placeholders only)
            f" WHERE state = {mark} AND event IN ({marks}))"
        )
        params += ["started", *forge_events]
    return " AND ".join(clauses) or true, params


def owner(row: Sequence[Any], *, ts: Callable[[Any], datetime], expired: bool) -> RunOwner:
    """A run owner from the row ``owner_id, host, pid, since, heartbeat_at, expires_at``
    (``ts`` reads the backend's timestamps)."""
    return RunOwner(
        owner_id=row[0],
        host=row[1],
        pid=int(row[2]),
        since=ts(row[3]),
        heartbeat_at=ts(row[4]),
        expires_at=ts(row[5]),
        expired=expired,
    )


def utc(moment: datetime) -> datetime:
    """The same instant as an aware UTC datetime (naive values are taken as UTC).

    An instant outside what datetime holds in UTC (0001-01-01T00:00+01:00 is before year 1
    UTC) is clamped to datetime's first or last UTC instant: as a bound (``since``) it means
    the same, and converting it must not fail (it was a 500).
    """
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        offset = moment.utcoffset()
        early = offset is not None and offset > timedelta(0)
        return (datetime.min if early else datetime.max).replace(tzinfo=UTC)


def now() -> datetime:
    """The current time, aware UTC."""
    return datetime.now(UTC)


def ts_text(moment: datetime) -> str:
    """Fixed-width UTC text, so that text order is time order (SQLite stores these)."""
    # isoformat pads the year to four digits; strftime's %Y does not on glibc ("999-..."),
    # which put year 999 after year 2026 in text order.
    return utc(moment).isoformat(timespec="microseconds")


def parse_ts(value: str | datetime) -> datetime:
    """A timestamp read back from either backend."""
    if isinstance(value, datetime):
        return utc(value)
    return datetime.fromisoformat(value)


def record_json(
    record: ConversationRecord, cipher: SecretCipher | None, previous: str | None = None
) -> str:
    """The base state as saved: secrets encrypted or redacted, never in clear.

    A secret the caller only knows as redacted keeps the sealed value saved in ``previous``
    (the stored state), so a process without the key cannot destroy encrypted secrets by
    saving a record it read.
    """
    sealed = seal_secrets(record.secrets, cipher)
    if previous is not None and REDACTED in record.secrets.values():
        stored: dict[str, str] = json.loads(previous).get("secrets", {})
        for name, value in record.secrets.items():
            if value == REDACTED and name in stored:
                sealed[name] = stored[name]
    return record.model_copy(update={"secrets": sealed}).model_dump_json()


def needs_previous(record: ConversationRecord) -> bool:
    """Whether saving ``record`` must read the stored state first (see :func:`record_json`)."""
    return REDACTED in record.secrets.values()


def record_from_json(text: str | bytes, cipher: SecretCipher | None) -> ConversationRecord:
    """The base state read back, secrets decrypted when our key can."""
    record = ConversationRecord.model_validate_json(text)
    if not record.secrets:
        return record
    return record.model_copy(update={"secrets": open_secrets(record.secrets, cipher)})


def event_json(event: ConversationEvent) -> str:
    """The event body as saved."""
    return EVENT_ADAPTER.dump_json(event).decode()


_EVENT_LIST: TypeAdapter[list[ConversationEvent]] = TypeAdapter(list[ConversationEvent])
_STORED_FIELDS = frozenset(StoredEvent.model_fields)
_set = object.__setattr__


def envelope(
    conversation_id: str, seq: int, timestamp: datetime, event: ConversationEvent
) -> StoredEvent:
    """A StoredEvent from parts that are already valid (typed columns, a validated event).

    What ``BaseModel.model_construct`` does, minus its per-field loop: replaying long
    conversations would otherwise spend much of its time here.
    """
    stored = StoredEvent.__new__(StoredEvent)
    _set(
        stored,
        "__dict__",
        {"conversation_id": conversation_id, "seq": seq, "timestamp": timestamp, "event": event},
    )
    _set(stored, "__pydantic_fields_set__", set(_STORED_FIELDS))
    _set(stored, "__pydantic_extra__", None)
    _set(stored, "__pydantic_private__", None)
    return stored


def stored_events(conversation_id: str, rows: Sequence[Sequence[Any]]) -> list[StoredEvent]:
    """Log rows ``(seq, ts, body)`` as StoredEvents; every event body is validated.

    A page of bodies is validated in one call rather than one per row.
    """
    if not rows:
        return []
    events = _EVENT_LIST.validate_json("[" + ",".join(row[2] for row in rows) + "]")
    fromiso = datetime.fromisoformat
    return [
        envelope(
            conversation_id,
            row[0],
            fromiso(row[1]) if isinstance(row[1], str) else utc(row[1]),
            event,
        )
        for row, event in zip(rows, events, strict=True)
    ]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

CURSOR_PATTERN = r"^[0-9]{1,16}\.[A-Za-z0-9._-]{1,128}$"
"""Every text of this shape is a cursor (microseconds since the epoch, a dot, an id), so a
schema that states it admits no cursor the store then refuses."""


def encode_cursor(created_at: datetime, conversation_id: str) -> str:
    """A cursor pointing just past this conversation in newest-first order."""
    return f"{(utc(created_at) - _EPOCH) // _MICROSECOND}.{conversation_id}"


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor points past."""
    if re.fullmatch(CURSOR_PATTERN, cursor) is None:
        raise UsageError(
            "invalid conversation list cursor; pass the next_cursor of a previous page"
        )
    micros, conversation_id = cursor.split(".", 1)
    return _EPOCH + int(micros) * _MICROSECOND, conversation_id


def check_limit(limit: int) -> None:
    """Reject page sizes that cannot be served."""
    if limit < 1:
        raise UsageError(f"limit must be at least 1, got {limit}")


def execution_from_row(row: dict[str, Any]) -> ExecutionUsage:
    """A ledger row as the model (decimal columns may come back as text or Decimal)."""
    ceiling, lease = row["cost_ceiling_usd"], row["lease_expires_at"]
    return ExecutionUsage(
        execution_id=row["execution_id"],
        conversation_id=row["conversation_id"],
        model=row["model"],
        provider=row["provider"],
        cost_ceiling_usd=None if ceiling is None else Decimal(str(ceiling)),
        requests=row["requests"],
        tokens_in=row["tokens_in"],
        tokens_out=row["tokens_out"],
        cost_usd=Decimal(str(row["cost_usd"])),
        status=ExecutionStatus(row["status"]),
        status_reason=row["status_reason"],
        updated_at=parse_ts(row["updated_at"]),
        lease_expires_at=None if lease is None else parse_ts(lease),
    )


@dataclass(frozen=True)
class HistoryQuery:
    """The SQL of one history page, the same for both backends but for its placeholders."""

    sql: str
    params: list[Any]
    backwards: bool
    """True when rows come newest first and must be reversed into seq order."""


def history_query(
    conversation_id: str,
    *,
    after: int | None,
    before: int | None,
    since: datetime | None,
    kinds: frozenset[str] | None,
    limit: int,
    dialect: Literal["sqlite", "postgres"],
) -> HistoryQuery:
    """``SELECT seq, ts, body`` for a page of the log: strictly after/before, kinds, since.

    With ``before`` and no ``after`` the page just before ``before`` is read newest first
    (``backwards``); the caller reverses it.
    """
    check_limit(limit)
    mark = "?" if dialect == "sqlite" else "%s"
    clauses = [f"conversation_id = {mark}"]
    params: list[Any] = [conversation_id]
    if after is not None:
        clauses.append(f"seq > {mark}")
        params.append(after)
    if before is not None:
        clauses.append(f"seq < {mark}")
        params.append(before)
    if since is not None:
        clauses.append(f"ts >= {mark}")
        params.append(stored_ts(since, dialect))
    if kinds is not None:
        if dialect == "sqlite":
            clauses.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(sorted(kinds))
        else:
            clauses.append("kind = ANY(%s)")
            params.append(sorted(kinds))
    backwards = before is not None and after is None
    body = "body" if dialect == "sqlite" else "body::text"
    sql = (
        f"SELECT seq, ts, {body} FROM events WHERE {' AND '.join(clauses)}"  # noqa: S608
        f" ORDER BY seq {'DESC' if backwards else 'ASC'} LIMIT {mark}"
    )
    return HistoryQuery(sql=sql, params=[*params, limit], backwards=backwards)


Dialect = Literal["sqlite", "postgres"]


def stored_ts(moment: datetime, dialect: Dialect) -> str | datetime:
    """A timestamp as the backend stores it: fixed-width text in SQLite, aware in PostgreSQL."""
    return ts_text(moment) if dialect == "sqlite" else utc(moment)


def insert_conversation(
    record: ConversationRecord, state: str, dialect: Dialect
) -> tuple[str, tuple[Any, ...]]:
    """The INSERT of a new conversation row (``state`` is its sealed JSON) and its values."""
    mark = "?" if dialect == "sqlite" else "%s"
    state_mark = mark if dialect == "sqlite" else "%s::jsonb"
    sql = (  # only placeholders are interpolated
        "INSERT INTO conversations (id, project_id, status, state, created_at, updated_at,"  # noqa: S608
        f" parent_id, root_id) VALUES ({mark}, {mark}, {mark}, {state_mark}, {mark}, {mark},"
        f" {mark}, {mark})"
    )
    values = (
        record.id,
        record.task.project_id,
        record.status.value,
        state,
        stored_ts(record.created_at, dialect),
        stored_ts(record.updated_at, dialect),
        record.parent_id,
        record.root_id,
    )
    return sql, values


def listing_query(
    status: ConversationStatus | None,
    project_id: str | None,
    *,
    cursor: str | None,
    limit: int,
    dialect: Dialect,
    search: str | None = None,
    forge_events: Sequence[str] = (),
) -> tuple[str, list[Any]]:
    """``SELECT state, created_at, id`` for one page of conversations, newest first
    (``search``, ``forge_events``: see ``filters``).

    One row more than ``limit`` is asked for: its presence says a next page exists.
    """
    check_limit(limit)
    mark = "?" if dialect == "sqlite" else "%s"
    true = "1" if dialect == "sqlite" else "TRUE"
    where, params = filters(
        status, project_id, mark=mark, true=true, search=search, forge_events=forge_events
    )
    if cursor is not None:
        created, last_id = decode_cursor(cursor)
        where += f" AND (created_at, id) < ({mark}, {mark})"
        params += [stored_ts(created, dialect), last_id]
    state = "state" if dialect == "sqlite" else "state::text"
    sql = (
        f"SELECT {state}, created_at, id FROM conversations WHERE {where}"  # noqa: S608
        f" ORDER BY created_at DESC, id DESC LIMIT {mark}"
    )
    return sql, [*params, limit + 1]


def conversation_page(
    rows: Sequence[Sequence[Any]], limit: int, cipher: SecretCipher | None
) -> ConversationPage:
    """The page of a ``listing_query``'s rows, with the cursor of the next one if any."""
    items = tuple(record_from_json(row[0], cipher) for row in rows[:limit])
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = encode_cursor(parse_ts(last[1]), last[2])
    return ConversationPage(items=items, next_cursor=next_cursor)
