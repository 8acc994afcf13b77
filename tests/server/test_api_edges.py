"""Edges of the REST API against the app on loopback: a `since` bound outside datetime's UTC
range or before year 1000 answers the right events (not a 500, not none), and a path's
`Allow` is what is routed."""

from __future__ import annotations

import httpx
import pytest

from synthorg.domain import MessageEvent
from synthorg.store import Store

from .conftest import Keys
from .helpers import create

pytestmark = pytest.mark.bwrap


async def test_since_bounds_far_in_the_past_or_future(
    live: str, keys: Keys, repo: object, store: Store
) -> None:
    headers = {"Authorization": f"Bearer {keys.operator}"}
    async with httpx.AsyncClient(base_url=live, headers=headers) as client:
        cid = (await create(client, repo))["id"]
        for n in range(5):
            await store.append(cid, MessageEvent(role="user", text=f"m{n}"))
        total = (
            await client.get(f"/api/conversations/{cid}/events", params={"limit": 1000})
        ).json()
        everything = len(total["items"])
        assert everything >= 5
        for since in ("0001-01-01T00:00:00+01:00", "0999-01-01T00:00:00Z", "0001-01-01T00:00:00Z"):
            page = await client.get(f"/api/conversations/{cid}/events", params={"since": since})
            assert page.status_code == 200, (since, page.text)
            assert len(page.json()["items"]) == everything, since
        for since in ("9999-12-31T23:59:59-01:00", "9999-12-31T23:59:59Z"):
            page = await client.get(f"/api/conversations/{cid}/events", params={"since": since})
            assert page.status_code == 200, (since, page.text)
            assert page.json()["items"] == [], since


async def test_allow_is_what_is_routed(live: str, keys: Keys) -> None:
    headers = {"Authorization": f"Bearer {keys.admin}"}
    async with httpx.AsyncClient(base_url=live, headers=headers) as client:
        options = await client.options("/api/conversations/count")
        assert options.status_code == 204
        assert options.headers["Allow"] == "GET, HEAD, OPTIONS"
        deleted = await client.delete("/api/conversations/count")
        assert deleted.status_code == 405, deleted.text
        assert deleted.headers["Allow"] == "GET, HEAD, OPTIONS"
        # A conversation's own path keeps its DELETE.
        assert "DELETE" in (await client.options("/api/conversations/conv-x")).headers["Allow"]
