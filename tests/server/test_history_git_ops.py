"""Event history pages, git views, health/ready/metrics, reconciliation at start-up."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from synthorg.domain import (
    ActionEvent,
    ConversationStatus,
    MessageEvent,
    ObservationEvent,
)
from synthorg.server import KeyStore, ServerSettings, create_app
from synthorg.service.runs import LocalRunService
from synthorg.store import Store
from synthorg.store.sqlite import SqliteStore
from synthorg.workspace.git import run_git_sync

from .conftest import Keys, client_for
from .helpers import create, wait_status, with_first_event

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


async def test_history_by_seq_time_and_kind(
    operator: httpx.AsyncClient, repo: Path, store: Store
) -> None:
    cid = (await create(operator, repo))["id"]
    await with_first_event(store, cid)
    for i in range(9):
        await store.append(cid, MessageEvent(role="user", text=f"m{i}"))
    url = f"/api/conversations/{cid}/events"
    page = (await operator.get(url, params={"limit": 4})).json()
    assert [e["seq"] for e in page["items"]] == [1, 2, 3, 4]
    assert page["next_after"] == 4 and page["last_seq"] == 10
    page = (await operator.get(url, params={"after": 8, "limit": 4})).json()
    assert [e["seq"] for e in page["items"]] == [9, 10] and page["next_after"] is None
    back = (await operator.get(url, params={"before": 6, "limit": 2})).json()
    assert [e["seq"] for e in back["items"]] == [4, 5]
    window = (await operator.get(url, params={"after": 2, "before": 5})).json()
    assert [e["seq"] for e in window["items"]] == [3, 4]
    only = (await operator.get(url, params={"kind": "message", "limit": 3})).json()
    assert [e["event"]["kind"] for e in only["items"]] == ["message"] * 3
    cut = datetime.now(UTC)
    await asyncio.sleep(0.01)
    await store.append(cid, MessageEvent(role="user", text="late"))
    since = (await operator.get(url, params={"since": cut.isoformat()})).json()
    assert [e["event"]["text"] for e in since["items"]] == ["late"]
    future = (cut + timedelta(days=1)).isoformat()
    assert (await operator.get(url, params={"since": future})).json()["items"] == []
    assert (await operator.get(url, params={"kind": "nope"})).status_code == 422
    assert (await operator.get(url, params={"limit": 0})).status_code == 422
    assert (await operator.get("/api/conversations/conv-x/events")).status_code == 404


async def test_a_cursor_past_the_stores_integers_is_refused_not_a_500(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    cid = (await create(operator, repo))["id"]
    url = f"/api/conversations/{cid}/events"
    for cursor in ("after", "before"):
        too_far = await operator.get(url, params={cursor: 2**70})
        assert too_far.status_code == 422, (cursor, too_far.status_code, too_far.text[:300])
    largest = await operator.get(url, params={"after": 2**63 - 1})
    assert largest.status_code == 200 and largest.json()["items"] == []


async def test_git_views_of_the_worktree(operator: httpx.AsyncClient, repo: Path) -> None:
    body = await create(operator, repo, start=True)
    cid = body["id"]
    await wait_status(operator, cid, "finished")
    worktree = Path(body["workspace"]["path"])
    (worktree / "README.md").write_text("changed\n")
    base = f"/api/conversations/{cid}"
    changes = (await operator.get(f"{base}/changes")).json()["items"]
    assert {(c["path"], c["status"]) for c in changes} == {
        ("README.md", "modified"),
        ("progress.txt", "added"),
    }
    # The gate landed the run's work; the README edit came after it.
    diff = (await operator.get(f"{base}/diff", params={"path": "README.md"})).json()
    assert diff["path"] == "README.md" and "+changed" in diff["diff"]
    assert "progress.txt" not in diff["diff"]
    whole = (await operator.get(f"{base}/diff")).json()
    assert "progress.txt" in whole["diff"]
    [landed] = (await operator.get(f"{base}/commits")).json()["items"]
    run_git_sync(["add", "-A"], worktree)
    run_git_sync(["commit", "-q", "-m", "agent work"], worktree)
    commits = (await operator.get(f"{base}/commits")).json()["items"]
    assert [c["subject"] for c in commits] == ["agent work", landed["subject"]]
    # The user's checkout is untouched.
    assert (repo / "README.md").read_text() == "hello\n"
    for verb in ("post", "put", "delete"):
        response = await operator.request(verb.upper(), f"{base}/changes")
        assert response.status_code == 405


async def test_git_views_refused_without_git(operator: httpx.AsyncClient, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    refused = await operator.post(
        "/api/conversations", json={"repository": str(plain), "prompt": "append progress"}
    )
    assert refused.status_code == 400 and "not a git repository" in refused.json()["detail"]
    cid = (await create(operator, plain, worktree=False))["id"]  # in place, asked explicitly
    response = await operator.get(f"/api/conversations/{cid}/changes")
    assert response.status_code == 409 and "in place" in response.json()["detail"]


async def test_metrics_count_requests_and_commands(app: FastAPI, keys: Keys, repo: Path) -> None:
    async with client_for(app, keys.operator) as client:
        await create(client, repo)
        await client.get("/api/conversations/conv-nope")
        text = (await client.get("/metrics")).text
    assert 'synthorg_run_commands_total{command="create"} 1.0' in text
    assert (
        'synthorg_http_requests_total{method="GET",route="/api/conversations/{conversation_id}",'
        'status="404"} 1.0'
    ) in text
    assert "synthorg_http_request_duration_seconds_bucket" in text


async def test_ready_reports_a_closed_store(
    settings: ServerSettings, tmp_path: Path, service: LocalRunService, key_store: KeyStore
) -> None:
    dead = await SqliteStore.open(tmp_path / "dead.db")
    app = create_app(settings, store=dead, run_service=service, auth=key_store)
    async with app.router.lifespan_context(app), client_for(app, None) as client:
        assert (await client.get("/ready")).json()["ready"] is True
        await dead.close()
        response = await client.get("/ready")
        assert response.status_code == 503 and response.json()["ready"] is False


async def test_start_up_reconciles_what_a_dead_server_left_running(
    settings: ServerSettings,
    store: Store,
    service: LocalRunService,
    key_store: KeyStore,
    keys: Keys,
    repo: Path,
) -> None:
    from synthorg.server.wire import CreateConversation

    request = CreateConversation(repository=str(repo), prompt="x")
    record = await service.create(request.task(), request.options())
    await store.save_conversation(record.model_copy(update={"status": ConversationStatus.RUNNING}))
    await store.append(
        record.id, ActionEvent(kind="action", action_id="act-open", tool_name="terminal")
    )
    await store.append(
        record.id, ActionEvent(kind="action", action_id="act-done", tool_name="terminal")
    )
    await store.append(record.id, ObservationEvent(action_id="act-done", content="ok"))
    app = create_app(settings, store=store, run_service=service, auth=key_store)
    async with app.router.lifespan_context(app), client_for(app, keys.viewer) as client:
        body = (await client.get(f"/api/conversations/{record.id}")).json()
        assert body["status"] == "interrupted" and "died" in body["error"]
        log = (await client.get(f"/api/conversations/{record.id}/events")).json()["items"]
        observations = [e["event"] for e in log if e["event"]["kind"] == "observation"]
        assert [(o["action_id"], o["is_error"]) for o in observations] == [
            ("act-done", False),
            ("act-open", True),
        ]
        assert observations[-1]["non_retryable"] is True
        assert log[-1]["event"]["kind"] == "status_change"
        assert log[-1]["event"]["new"] == "interrupted"
