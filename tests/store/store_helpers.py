"""Builders shared by the store tests (records, events, unique ids)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from synthorg.domain import AgentIdentity, ConversationRecord, MessageEvent, Task


def uid(prefix: str = "c") -> str:
    """A fresh id, so tests sharing one database never collide."""
    return f"{prefix}-{secrets.token_hex(6)}"


def record(
    conversation_id: str | None = None,
    *,
    project_id: str = "proj",
    created_at: datetime | None = None,
    **fields: object,
) -> ConversationRecord:
    """A valid conversation record."""
    moment = created_at or datetime.now(UTC)
    return ConversationRecord.model_validate(
        {
            "id": conversation_id or uid(),
            "task": Task(id=uid("t"), project_id=project_id, prompt="fix it", repository="/r"),
            "agent": AgentIdentity(id="agent-1"),
            "loop_type": "react",
            "model": "test-model",
            "created_at": moment,
            "updated_at": moment,
            **fields,
        }
    )


def message(i: int) -> MessageEvent:
    """A small distinguishable event."""
    return MessageEvent(role="user", text=f"m{i}")


def stamps(start: datetime, count: int) -> list[datetime]:
    """``count`` distinct creation times one second apart."""
    return [start + timedelta(seconds=i) for i in range(count)]


def raw_saved_text(url: str) -> str:
    """Everything the database holds about conversations, as the backend saved it.

    SQLite: the bytes of the database file and its WAL. PostgreSQL: the state column as text.
    """
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT state::text FROM conversations").fetchall()
        return "\n".join(row[0] for row in rows)
    from pathlib import Path

    chunks = []
    for suffix in ("", "-wal"):
        file = Path(url + suffix)
        if file.exists():
            chunks.append(file.read_bytes().decode("latin-1"))
    return "\n".join(chunks)


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Wait for ``condition`` (checked between event-loop turns), failing after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.01)
