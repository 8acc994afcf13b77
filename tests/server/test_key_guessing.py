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
