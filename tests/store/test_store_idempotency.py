"""Idempotency keys in the store: one claim per slot, the response remembered, a failed request
forgotten, an expired key gone — on both backends, and across reopening the store."""

from __future__ import annotations

import asyncio

from synthorg.store import Store, open_store
from synthorg.store.protocol import IdempotencyRecord, IdempotencySlot


def _slot(key: str, caller: str = "key-1") -> IdempotencySlot:
    return IdempotencySlot(caller=caller, route="POST /api/conversations", key=key)


async def test_first_claim_wins_and_its_response_is_remembered(
    store: Store, store_url: str
) -> None:
    slot = _slot("a")
    assert await store.claim_idempotency_key(slot, "fp1", ttl_s=3600) is None
    in_progress = await store.claim_idempotency_key(slot, "fp1", ttl_s=3600)
    assert in_progress == IdempotencyRecord(fingerprint="fp1", status=None, body=None)
    await store.complete_idempotency_key(slot, 201, {"id": "conv-1", "n": [1, 2]})
    reopened = await open_store(store_url)  # what a restarted server sees
    try:
        done = await reopened.claim_idempotency_key(slot, "fp2", ttl_s=3600)
    finally:
        await reopened.close()
    assert done == IdempotencyRecord(
        fingerprint="fp1", status=201, body={"id": "conv-1", "n": [1, 2]}
    )
    # Per caller: another API key's same key is a different slot.
    assert await store.claim_idempotency_key(_slot("a", "key-2"), "fp1", ttl_s=3600) is None


async def test_released_and_expired_keys_can_be_claimed_again(store: Store) -> None:
    released = _slot("b")
    assert await store.claim_idempotency_key(released, "fp", ttl_s=3600) is None
    await store.release_idempotency_key(released)
    assert await store.claim_idempotency_key(released, "fp", ttl_s=3600) is None
    expired = _slot("c")
    assert await store.claim_idempotency_key(expired, "old", ttl_s=0) is None
    assert await store.claim_idempotency_key(expired, "new", ttl_s=3600) is None
    again = await store.claim_idempotency_key(expired, "new", ttl_s=3600)
    assert again is not None and again.fingerprint == "new"


async def test_concurrent_claims_of_one_slot_let_one_through(store: Store) -> None:
    slot = _slot("d")
    claims = await asyncio.gather(
        *(store.claim_idempotency_key(slot, "fp", ttl_s=3600) for _ in range(8))
    )
    assert sum(claim is None for claim in claims) == 1
