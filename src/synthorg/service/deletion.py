"""Deleting a conversation (a root: its whole delegation tree): what refuses it."""

from __future__ import annotations

from synthorg.domain import ConversationRecord
from synthorg.errors import ConflictError


def refuse_active(record: ConversationRecord, *, active: bool) -> None:
    """The one delete-while-active rule: ConflictError while a run of ``record`` is in
    progress, here (``active``) or as its record says (another process may hold it)."""
    if active or record.status.is_active:
        raise ConflictError(
            f"conversation {record.id} is {record.status.value}: cancel or interrupt "
            "it before deleting"
        )
