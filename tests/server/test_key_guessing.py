"""Guessing API keys: the REST Bearer path has the same failed-attempt limit as the console's
sign-in (one count per address), and a 422 never echoes the body it refused, a key in it
included. Against the app served by uvicorn on loopback."""

from __future__ import annotations

import httpx
import pytest

from .conftest import Keys

pytestmark = pytest.mark.bwrap

LIMIT = 10  # the default [server] signin_max_failures


async def test_wrong_bearer_keys_are_limited_then_every_key_waits(live: str, keys: Keys) -> None:
    prefix, key_id, _ = keys.viewer.split("_", 2)
    async with httpx.AsyncClient(base_url=live) as client:
        for n in range(LIMIT):
            guess = {"Authorization": f"Bearer {prefix}_{key_id}_{'w' * 42}{n % 10}"}
            assert (await client.get("/api/conversations", headers=guess)).status_code == 401
        refused = await client.get(
            "/api/conversations", headers={"Authorization": "Bearer another-guess"}
        )
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        # The good key waits too: otherwise 200 against 429 would tell a guess was right.
        good = await client.get(
            "/api/conversations", headers={"Authorization": f"Bearer {keys.viewer}"}
        )
        assert good.status_code == 429
        # One count per address, whichever way the keys come in.
        signin = await client.post("/console/session", json={"key": keys.viewer})
        assert signin.status_code == 429


async def test_a_refused_body_is_never_echoed(live: str, keys: Keys) -> None:
    async with httpx.AsyncClient(base_url=live) as client:
        as_text = await client.post(
            "/console/session", content=keys.admin, headers={"Content-Type": "text/plain"}
        )
        assert as_text.status_code == 422
        assert keys.admin not in as_text.text and keys.admin[-20:] not in as_text.text
        wrong_type = await client.post("/console/session", json={"key": [keys.admin]})
        assert wrong_type.status_code == 422
        assert keys.admin[-20:] not in wrong_type.text
        create = await client.post(
            "/api/conversations",
            json={"prompt": "x", "repository": 7, "secrets": {"TOKEN": "sk-live-do-not-echo"}},
            headers={"Authorization": f"Bearer {keys.operator}"},
        )
        assert create.status_code == 422
        assert "sk-live-do-not-echo" not in create.text
        detail = create.json()["detail"]
        assert detail and all(set(e) <= {"type", "loc", "msg"} for e in detail), detail


async def test_websocket_auth_frames_count_too(live: str, keys: Keys, repo: object) -> None:
    """Wrong keys in WebSocket auth frames count with the others: past the limit even the
    good key's socket is closed, saying why (and REST from that address waits too)."""
    from websockets.exceptions import ConnectionClosed

    from .helpers import create
    from .wsclient import open_stream

    async with httpx.AsyncClient(
        base_url=live, headers={"Authorization": f"Bearer {keys.operator}"}
    ) as client:
        cid = (await create(client, repo))["id"]

    async def close_of(token: str) -> tuple[int | None, str]:
        ws = await open_stream(live, cid, token)
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
        return ws.close_code, ws.close_reason or ""

    for n in range(LIMIT):
        assert (await close_of(f"so_wrong_{n}"))[0] == 4401
    code, reason = await close_of(keys.viewer)
    assert code == 4401 and "too many failed API keys" in reason, reason
    async with httpx.AsyncClient(base_url=live) as client:
        waited = await client.get(
            "/api/conversations", headers={"Authorization": f"Bearer {keys.viewer}"}
        )
    assert waited.status_code == 429
