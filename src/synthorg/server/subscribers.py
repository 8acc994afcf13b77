"""Caps live WebSocket subscribers per conversation."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from synthorg.errors import ConflictError


class SubscriberLimit:
    """Counts live subscribers per conversation and refuses one over the cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._counts: dict[str, int] = {}

    def count(self, conversation_id: str) -> int:
        """Live subscribers of the conversation."""
        return self._counts.get(conversation_id, 0)

    def total(self) -> int:
        """Live subscribers over all conversations."""
        return sum(self._counts.values())

    def acquire(self, conversation_id: str) -> None:
        """Take a subscription slot; ConflictError when the cap is reached."""
        current = self._counts.get(conversation_id, 0)
        if current >= self.cap:
            raise ConflictError(
                f"conversation {conversation_id} already has {current} live subscribers "
                f"(the cap); close one and retry"
            )
        self._counts[conversation_id] = current + 1

    def release(self, conversation_id: str) -> None:
        """Give a slot back."""
        left = self._counts.get(conversation_id, 0) - 1
        if left > 0:
            self._counts[conversation_id] = left
        else:
            self._counts.pop(conversation_id, None)

    @contextlib.contextmanager
    def hold(self, conversation_id: str) -> Iterator[None]:
        """One subscription slot for the block; ConflictError when the cap is reached."""
        self.acquire(conversation_id)
        try:
            yield
        finally:
            self.release(conversation_id)
