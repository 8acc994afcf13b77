"""The conversation list's change socket over loopback: auth first, a ``changed`` frame when a
conversation the key can see changes, nothing for another project's, no commands."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect

from synthorg.domain import ConversationStatus, StatusChangeEvent
from synthorg.server import KeyStore, Role
from synthorg.store import Store

from .conftest import Keys
from .helpers import seed_conversations
from .wsclient import next_frame

pytestmark = pytest.mark.bwrap


async def _open(live: str, token: str) -> object:
    ws = await connect(f"ws://{live.removeprefix('http://')}/api/conversations/ws", proxy=None)
    await ws.send(json.dumps({"type": "auth", "token": token}))
    return ws


async def _flip(store: Store, cid: str) -> None:
    record = await store.get_conversation(cid)
    new = ConversationStatus.PAUSED
    await store.transition(
        record.model_copy(update={"status": new}), StatusChangeEvent(old=record.status, new=new)
    )


async def test_changes_are_pushed_to_keys_that_see_them(
    live: str, keys: Keys, key_store: KeyStore, store: Store
) -> None:
    (ours,) = await seed_conversations(store, ["ours"], project="alpha")
    (theirs,) = await seed_conversations(store, ["theirs"], project="beta")
    scoped = key_store.create("sam", {Role.VIEWER}, projects=["alpha"])[1]
    everyone = await _open(live, keys.viewer)
    alpha = await _open(live, scoped)
    for ws in (everyone, alpha):
        assert await next_frame(ws) == {"type": "subscribed"}  # type: ignore[arg-type]

    await _flip(store, theirs)
    assert await next_frame(everyone) == {"type": "changed"}  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):  # beta's change is not alpha's business
        await next_frame(alpha, timeout=1.0)  # type: ignore[arg-type]
    await _flip(store, ours)
    assert await next_frame(alpha) == {"type": "changed"}  # type: ignore[arg-type]

    await alpha.send(json.dumps({"type": "control", "action": "pause"}))  # type: ignore[attr-defined]
    refused = await next_frame(alpha)  # type: ignore[arg-type]
    assert refused["type"] == "error" and refused["status"] == 400
    for ws in (everyone, alpha):
        await ws.close()  # type: ignore[attr-defined]


async def test_a_bad_key_is_closed_4401(live: str) -> None:
    ws = await _open(live, "so_nope_" + "x" * 40)
    with pytest.raises(Exception):  # noqa: B017 - the close, however the library says it
        await asyncio.wait_for(ws.recv(), 10)  # type: ignore[attr-defined]
    assert ws.close_code == 4401  # type: ignore[attr-defined]
