"""HTTP hygiene (15.7): a body limit (413), OPTIONS and Allow listing every method of a path,
and a schema as strict as the server (empty cursor, relative repository, empty decision)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from synthorg.store.codec import CURSOR_PATTERN

from .conftest import Keys, client_for
from .helpers import create

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


async def test_a_body_over_the_limit_is_refused_with_413_and_not_stored(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    cid = (await create(operator, repo))["id"]
    huge = "x" * (2 * 1024 * 1024)  # default limit: 1 MiB
    declared = await operator.post(
        f"/api/conversations/{cid}/messages", json={"text": huge, "run": False}
    )
    assert declared.status_code == 413, declared.text
    assert declared.json()["code"] == "payload_too_large"

    async def chunks() -> object:  # no Content-Length: counted as it streams
        for _ in range(40):
            yield b" " * 65536

    streamed = await operator.post(
        "/api/conversations",
        content=chunks(),  # type: ignore[arg-type]
        headers={"Content-Type": "application/json"},
    )
    assert streamed.status_code == 413, streamed.text
    messages = (await operator.get(f"/api/conversations/{cid}/events")).json()["items"]
    assert not any(e["event"].get("text") == huge for e in messages)
    assert (await operator.get("/api/conversations/count")).json() == {"count": 1}


async def test_options_and_405_name_every_method_of_the_path(app: FastAPI, keys: Keys) -> None:
    async with client_for(app, None) as client:
        options = await client.options("/api/conversations/conv-x")
        assert options.status_code == 204
        assert options.headers["allow"] == "DELETE, GET, HEAD, OPTIONS"
        listing = await client.options("/api/conversations")
        assert listing.headers["allow"] == "GET, HEAD, OPTIONS, POST"
        assert (await client.options("/nowhere")).status_code == 404
    async with client_for(app, keys.viewer) as client:
        refused = await client.put("/api/conversations/conv-x")
        assert refused.status_code == 405
        assert refused.headers["allow"] == "DELETE, GET, HEAD, OPTIONS"


async def test_the_schema_refuses_what_the_server_refuses(
    app: FastAPI, operator: httpx.AsyncClient, repo: Path, keys: Keys
) -> None:
    schema = app.openapi()
    listing = schema["paths"]["/api/conversations"]["get"]["parameters"]
    cursor = next(p for p in listing if p["name"] == "cursor")
    assert cursor["schema"]["anyOf"][0]["pattern"] == CURSOR_PATTERN  # so never empty
    create_schema = schema["components"]["schemas"]["CreateConversation"]
    # An absolute path or a configured project's name (a travelling project), never relative.
    repository = re.compile(create_schema["properties"]["repository"]["pattern"])
    assert repository.search("/srv/repo") and repository.search("project:web")
    assert not repository.search("project") and not repository.search("srv/repo")
    decision = schema["components"]["schemas"]["DecisionRequest"]
    assert {"required": ["accepted"], "properties": {"accepted": {"minItems": 1}}} in decision[
        "anyOf"
    ]
    # ... and the server agrees with its schema.
    assert (await operator.get("/api/conversations", params={"cursor": ""})).status_code == 422
    relative = await operator.post(
        "/api/conversations", json={"repository": "project", "prompt": "x"}
    )
    assert relative.status_code == 422
    cid = (await create(operator, repo))["id"]
    async with client_for(app, keys.approver) as approver:
        empty = await approver.post(f"/api/conversations/{cid}/confirmation", json={})
        assert empty.status_code == 422


async def test_a_query_parameter_the_route_does_not_document_is_refused(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    """A misspelt filter is an error, never "no filter": ?staus=running listed every
    conversation as if each were running (and schemathesis's `?=null` was answered 200)."""
    await create(operator, repo)
    assert (await operator.get("/api/conversations", params={"status": "running"})).json()[
        "items"
    ] == []
    for query in ("staus=running", "=null", "status=running&limit=5&x=1"):
        refused = await operator.get(f"/api/conversations?{query}")
        assert refused.status_code == 422, (query, refused.text)
        unknown = [e for e in refused.json()["detail"] if e["type"] == "extra_forbidden"]
        assert unknown and all(e["loc"][0] == "query" for e in unknown), refused.text
    counted = await operator.get("/api/conversations/count?project=nope&typo=1")
    assert counted.status_code == 422
    # Documented parameters, repeated or blank, and HEAD stay as they were.
    assert (await operator.get("/api/conversations?limit=5&status=")).status_code == 422
    assert (await operator.get("/api/conversations?limit=5")).status_code == 200
    assert (await operator.head("/api/conversations?limit=5")).status_code in (200, 405)
