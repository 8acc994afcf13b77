"""Exactly-once across a restart (15.4): the same Idempotency-Key sent before and after the
server restarts has its effect once — one conversation, one delivered message."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import events
from .real_server import operator_headers, served_client

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


async def test_a_request_retried_after_a_restart_has_its_effect_once(
    home: Path, repo: Path, tmp_path: Path
) -> None:
    headers = operator_headers(home)
    log = tmp_path / "server.log"
    create = {"repository": str(repo), "prompt": "once", "start": False}
    message = {"text": "only once", "run": False}
    async with served_client(home, log, headers) as client:
        first = await client.post(
            "/api/conversations", json=create, headers={"Idempotency-Key": "c-1"}
        )
        assert first.status_code == 201, first.text
        cid = first.json()["id"]
        sent = await client.post(
            f"/api/conversations/{cid}/messages", json=message, headers={"Idempotency-Key": "m-1"}
        )
        assert sent.status_code == 200, sent.text

    async with served_client(home, log, headers) as client:
        again = await client.post(
            "/api/conversations", json=create, headers={"Idempotency-Key": "c-1"}
        )
        assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()
        assert (await client.get("/api/conversations/count")).json() == {"count": 1}
        resent = await client.post(
            f"/api/conversations/{cid}/messages", json=message, headers={"Idempotency-Key": "m-1"}
        )
        assert resent.status_code == 200 and resent.headers["idempotent-replayed"] == "true"
        assert resent.json() == sent.json()
        texts = [e["event"]["text"] for e in await events(client, cid, kind="message")]
        assert texts.count("only once") == 1
        changed = await client.post(
            "/api/conversations",
            json={**create, "prompt": "twice"},
            headers={"Idempotency-Key": "c-1"},
        )
        assert changed.status_code == 409
        assert changed.json()["code"] == "idempotency_key_reused"
