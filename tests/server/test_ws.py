"""The event WebSocket on a real uvicorn server: auth frame, history + live tail, inbound
frames, subscriber cap, slow consumers, and reconnects without gaps or duplicates."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

from synthorg.domain import MessageEvent, ObservationEvent
from synthorg.server import KeyStore, Role
from synthorg.server.stream import CLOSE_UNAUTHORIZED
from synthorg.store import Store

from .conftest import Keys
from .helpers import create, events, until_metric, wait_running, with_first_event
from .wsclient import next_event, next_frame, open_stream


async def new_conversation(live: str, keys: Keys, repo: Path, store: Store | None = None) -> str:
    """A conversation; with ``store``, one whose log starts at seq 1."""
    async with httpx.AsyncClient(
        base_url=live,
        headers={"Authorization": f"Bearer {keys.operator}"},
        timeout=60,  # creation makes a worktree: seconds on a machine at load 20+
    ) as client:
        cid: str = (await create(client, repo))["id"]
    if store is not None:
        await with_first_event(store, cid)
    return cid


async def closed_code(ws: object, timeout: float = 10) -> int:
    from websockets.asyncio.client import ClientConnection

    assert isinstance(ws, ClientConnection)
    with pytest.raises(ConnectionClosed):
        async with asyncio.timeout(timeout):
            while True:
                await ws.recv()
    assert ws.close_code is not None
    return ws.close_code


async def test_auth_frame_is_required(live: str, keys: Keys, repo: Path) -> None:
    cid = await new_conversation(live, keys, repo)
    wrong = await open_stream(live, cid, None)
    await wrong.send(json.dumps({"type": "message", "text": "hi"}))
    assert await closed_code(wrong) == 4401
    bad = await open_stream(live, cid, "so_nope_" + "z" * 43)
    assert await closed_code(bad) == 4401
    garbage = await open_stream(live, cid, None)
    await garbage.send("not json")
    assert await closed_code(garbage) == 4401
    missing = await open_stream(live, "conv-missing", keys.viewer)
    assert await closed_code(missing) == 4404


async def test_history_then_live_tail_in_order(
    live: str, keys: Keys, repo: Path, store: Store
) -> None:
    cid = await new_conversation(live, keys, repo, store)
    for i in range(4):
        await store.append(cid, MessageEvent(role="user", text=f"h{i}"))
    ws = await open_stream(live, cid, keys.viewer, after=2)
    hello = await next_frame(ws)
    assert hello == {"type": "subscribed", "after": 2, "last_seq": 5}
    assert [(await next_event(ws))["seq"] for _ in range(3)] == [3, 4, 5]
    await store.append(cid, MessageEvent(role="user", text="live"))
    frame = await next_event(ws)
    assert frame["seq"] == 6 and frame["event"]["text"] == "live"
    assert frame["conversation_id"] == cid and "timestamp" in frame
    await ws.close()


async def test_inbound_message_and_control_frames(live: str, keys: Keys, repo: Path) -> None:
    cid = await new_conversation(live, keys, repo)
    viewer = await open_stream(live, cid, keys.viewer)
    await next_frame(viewer)
    await viewer.send(json.dumps({"type": "message", "text": "hi", "run": False}))
    reply = await _reply(viewer)
    assert reply["type"] == "error" and reply["status"] == 403
    operator = await open_stream(live, cid, keys.operator)
    await next_frame(operator)
    await operator.send(json.dumps({"type": "message", "text": "note", "run": False}))
    assert (await _reply(operator)) == {"type": "ack", "for": "message", "delivery": "recorded"}
    await operator.send(json.dumps({"type": "control", "action": "pause"}))
    refused = await _reply(operator)
    assert refused["type"] == "error" and refused["status"] == 409
    await operator.send(json.dumps({"type": "bogus"}))
    assert (await _reply(operator))["status"] == 400
    await operator.send(json.dumps({"type": "control", "action": "resume"}))
    resumed = await _reply(operator)
    assert resumed["type"] == "ack" and resumed["action"] == "resume"
    # The recorded message reached both subscribers as an event.
    texts: list[str] = []
    while len(texts) < 1:
        frame = await next_event(viewer)
        if frame["event"]["kind"] == "message":
            texts.append(frame["event"]["text"])
    assert texts == ["note"]
    await viewer.close()
    await operator.close()


async def _reply(ws: object) -> dict[str, object]:
    from websockets.asyncio.client import ClientConnection

    assert isinstance(ws, ClientConnection)
    while True:
        frame = await next_frame(ws)
        if frame["type"] in ("ack", "error"):
            return frame


async def test_subscriber_cap_per_conversation(live: str, keys: Keys, repo: Path) -> None:
    cid = await new_conversation(live, keys, repo)
    other = await new_conversation(live, keys, repo)
    held = [await open_stream(live, cid, keys.viewer) for _ in range(4)]
    for ws in held:
        assert (await next_frame(ws))["type"] == "subscribed"
    over = await open_stream(live, cid, keys.viewer)
    assert await closed_code(over) == 4429
    elsewhere = await open_stream(live, other, keys.viewer)
    assert (await next_frame(elsewhere))["type"] == "subscribed"
    await held[0].close()
    await until_metric(live, "synthorg_ws_connections 4.0")  # the closed socket's slot is back
    again = await open_stream(live, cid, keys.viewer)
    assert (await next_frame(again))["type"] == "subscribed"
    for ws in [*held[1:], elsewhere, again]:
        await ws.close()


async def test_stalled_consumer_is_closed_and_resumes_without_gap(
    live: str, keys: Keys, repo: Path, store: Store
) -> None:
    cid = await new_conversation(live, keys, repo, store)
    # The client stops reading: its own buffers (max_queue=1) and the TCP buffers fill up.
    stalled = await open_stream(
        live, cid, keys.viewer, max_queue=1, max_size=None, compression=None
    )
    big = secrets.token_hex(32768)  # incompressible, 64 KiB
    for _ in range(300):
        await store.append(cid, ObservationEvent(action_id="act-1", content=big))
    await until_metric(live, 'synthorg_ws_closed_total{reason="4008"} 1.0')  # stalled: closed
    seen: list[int] = []
    with pytest.raises(ConnectionClosed):
        while True:
            frame = json.loads(await asyncio.wait_for(stalled.recv(), 10))
            if frame["type"] == "event":
                seen.append(frame["seq"])
    assert seen == list(range(1, len(seen) + 1)) and len(seen) < 301
    resumed = await open_stream(live, cid, keys.viewer, after=seen[-1] if seen else 0)
    rest = [(await next_event(resumed))["seq"] for _ in range(301 - len(seen))]
    assert seen + rest == list(range(1, 302))
    await resumed.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=6),
    total=st.integers(min_value=1, max_value=40),
)
async def test_reconnects_never_gap_or_duplicate(
    live: str, keys: Keys, repo: Path, store: Store, cuts: list[int], total: int
) -> None:
    """Disconnect after a random number of events, reconnect with after=<last seq>, while a
    producer keeps appending: the union of what arrives is exactly 1..N, in order."""
    cid = await new_conversation(live, keys, repo, store)
    wanted = total + 1

    async def produce() -> None:
        for i in range(total):
            await store.append(cid, MessageEvent(role="user", text=str(i)))
            if i % 3 == 0:
                await asyncio.sleep(0.002)

    producer = asyncio.create_task(produce())
    received: list[int] = []
    for cut in [*cuts, wanted]:
        after = received[-1] if received else 0
        ws = await open_stream(live, cid, keys.viewer, after=after)
        for _ in range(cut):
            if len(received) == wanted:
                break
            received.append((await next_event(ws))["seq"])
        await ws.close()
        if len(received) == wanted:
            break
    await producer
    assert received == list(range(1, wanted + 1))


async def test_a_revoked_key_loses_its_open_sockets_within_a_second(
    live: str, keys: Keys, repo: Path, key_store: KeyStore
) -> None:
    """15.3: REST refused a revoked key while its open socket still paused the run."""
    record, key = key_store.create("mallory", {Role.OPERATOR})
    async with httpx.AsyncClient(
        base_url=live,
        headers={"Authorization": f"Bearer {keys.operator}"},
        timeout=60,  # creation makes a worktree: seconds on a machine at load 20+
    ) as client:
        cid = (await create(client, repo, start=True, model="slow50"))["id"]
        await wait_running(client, cid)
        commanding = await open_stream(live, cid, key)
        idle = await open_stream(live, cid, key)
        for ws in (commanding, idle):
            assert (await next_frame(ws))["type"] == "subscribed"
        # Revoked from another process's view of the key file (as `synthorg serve keys revoke`).
        KeyStore(key_store.path).revoke(record.id)
        revoked_at = asyncio.get_running_loop().time()
        with contextlib.suppress(ConnectionClosed):
            await commanding.send(json.dumps({"type": "control", "action": "pause"}))
        assert await closed_code(commanding) == CLOSE_UNAUTHORIZED
        assert await closed_code(idle) == CLOSE_UNAUTHORIZED
        # The server's bound is KEY_RECHECK_S (0.25 s); this one only says "not when the run
        # ends", generous for a machine at load 20+ (the pause never landing is the real check).
        assert asyncio.get_running_loop().time() - revoked_at < 10.0
        body = (await client.get(f"/api/conversations/{cid}")).json()
        assert body["status"] == "running" and body["active"]
        assert await events(client, cid, kind="pause") == []
        assert (await client.post(f"/api/conversations/{cid}/cancel")).status_code == 200
