"""Idempotency keys: a retried request with the same key has its effect once.

A client sends ``Idempotency-Key: <unique string>`` on a request that has an effect (create a
conversation, send a message). The first request with a key runs; a retry with the same key
and the same body gets the first response again (``Idempotent-Replayed: true``) and has no
second effect; the same key with a different body is refused (409), and while the first is
still in flight a retry is refused (409, retry later). Keys are per API key and per route,
kept in the store for ``ttl_s`` (so a restarted server, or another one on the same store,
still knows them). Only successful responses are remembered: a refused request changed
nothing, so its retry may succeed. A request cut off by a crash leaves its key in progress
until it expires: its effect is unknown, so it is refused rather than done twice.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable

from fastapi.responses import JSONResponse
from pydantic import BaseModel

from synthorg.errors import ConflictError
from synthorg.store.protocol import IdempotencySlot, IdempotencyStore

REPLAYED = "Idempotent-Replayed"


class IdempotencyKeyReused(ConflictError):
    """The key was used before with another request body (answered 409)."""


class IdempotencyKeys:
    """The remembered keys of one app, kept in its store."""

    def __init__(self, store: IdempotencyStore, *, ttl_s: float = 24 * 3600) -> None:
        self.store = store
        self.ttl_s = ttl_s

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
        slot = IdempotencySlot(caller=caller, route=route, key=key)
        fingerprint = hashlib.sha256(request.model_dump_json().encode()).hexdigest()
        first = await self.store.claim_idempotency_key(slot, fingerprint, ttl_s=self.ttl_s)
        if first is not None:
            if first.fingerprint != fingerprint:
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was used with a different request body; use a new "
                    "key for a new request"
                )
            if first.status is None:
                raise ConflictError(
                    "a request with this Idempotency-Key is still in progress (or was cut off "
                    "by a server restart, its effect unknown); retry later, or check and use "
                    "a new key"
                )
            return JSONResponse(first.body, status_code=first.status, headers={REPLAYED: "true"})
        try:
            result = await call()
        except BaseException:
            await asyncio.shield(self.store.release_idempotency_key(slot))
            raise
        await asyncio.shield(
            self.store.complete_idempotency_key(slot, status, result.model_dump(mode="json"))
        )
        return result
