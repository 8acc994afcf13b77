"""Task-text search through the list API: validated, documented, the cursor paging intact."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from synthorg.store import Store

from .helpers import seed_conversations

pytestmark = pytest.mark.bwrap


async def test_search_pages_through_the_whole_store(
    app: FastAPI, store: Store, operator: httpx.AsyncClient
) -> None:
    prompts = [f"{'Fix the FROBNICATOR' if i % 100 == 3 else 'chore'} #{i}" for i in range(1_000)]
    ids = await seed_conversations(store, prompts)
    wanted = [cid for cid, p in zip(ids, prompts, strict=True) if "FROB" in p][::-1]
    seen: list[str] = []
    params: dict[str, str | int] = {"search": "frobnicator", "limit": 4}
    while True:
        page = (await operator.get("/api/conversations", params=params)).json()
        seen += [c["id"] for c in page["items"]]
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert seen == wanted
    count = await operator.get("/api/conversations/count", params={"search": "FROBNICATOR"})
    assert count.json() == {"count": len(wanted)}


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\x00b"])
async def test_search_is_validated(app: FastAPI, operator: httpx.AsyncClient, bad: str) -> None:
    for path in ("/api/conversations", "/api/conversations/count"):
        response = await operator.get(path, params={"search": bad})
        assert response.status_code == 422, (path, response.text)


async def test_search_is_documented(app: FastAPI, operator: httpx.AsyncClient) -> None:
    schema = (await operator.get("/openapi.json")).json()
    params = schema["paths"]["/api/conversations"]["get"]["parameters"]
    search = next(p for p in params if p["name"] == "search")
    assert "task text" in search["description"]
