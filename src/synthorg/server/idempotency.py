"""Idempotency keys: a retried request with the same key has its effect once.

A client sends ``Idempotency-Key: <unique string>`` on a request that has an effect (create a
conversation, send a message). The first request with a key runs; a retry with the same key
and the same body gets the first response again (``Idempotent-Replayed: true``) and has no
second effect; the same key with a different body is refused (409), and while the first is
still in flight a retry is refused (409, retry later). Keys are per API key and per route,
remembered for ``ttl_s`` in this server process (a restart forgets them), at most
``capacity`` of them (the oldest go first). Only successful responses are remembered: a
refused request changed nothing, so its retry may succeed.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel

from synthorg.errors import ConflictError

REPLAYED = "Idempotent-Replayed"


class IdempotencyKeyReused(ConflictError):
    """The key was used before with another request body (answered 409)."""


@dataclass
class _Entry:
    fingerprint: str
    created: float
    status: int | None = None
    body: Any = None


class IdempotencyKeys:
    """The remembered keys of one app."""

    def __init__(self, *, ttl_s: float = 24 * 3600, capacity: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()

    def _prune(self, now: float) -> None:
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if now - entry.created < self.ttl_s and len(self._entries) <= self.capacity:
                return
            del self._entries[key]

    async def once[M: BaseModel](
        self,
        *,
        caller: str,
        route: str,
        key: str | None,
        request: BaseModel,
        status: int,
        call: Callable[[], Awaitable[M]],
    ) -> M | JSONResponse:
        """Run ``call`` once per (caller, route, key); replay its response to a retry."""
        if key is None:
            return await call()
        now = time.monotonic()
        self._prune(now)
        slot = (caller, route, key)
        fingerprint = hashlib.sha256(request.model_dump_json().encode()).hexdigest()
        entry = self._entries.get(slot)
        if entry is not None:
            if entry.fingerprint != fingerprint:
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was used with a different request body; use a new "
                    "key for a new request"
                )
            if entry.status is None:
                raise ConflictError(
                    "a request with this Idempotency-Key is still in progress; retry later"
                )
            return JSONResponse(entry.body, status_code=entry.status, headers={REPLAYED: "true"})
        entry = _Entry(fingerprint=fingerprint, created=now)
        self._entries[slot] = entry
        try:
            result = await call()
        except BaseException:
            self._entries.pop(slot, None)
            raise
        entry.status, entry.body = status, result.model_dump(mode="json")
        return result
