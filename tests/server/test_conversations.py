"""Conversation routes in-process over the real service: create, run to a commit, list,
filters, pagination, get, count, delete."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from synthorg.domain import ConversationStatus, StatusChangeEvent
from synthorg.store import Store

from .helpers import create, events, wait_running, wait_status

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


async def test_create_without_start_makes_worktree_and_created_conversation(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    body = await create(operator, repo, model="slow50", max_turns=7, budget_usd="1.5")
    assert body["status"] == "created" and body["active"] is False
    assert body["model"] == "slow50" and body["max_turns"] == 7 and body["budget_usd"] == "1.5"
    assert body["task"]["project_id"] == "project"
    workspace = body["workspace"]
    assert workspace["is_worktree"] is True
    assert workspace["branch"] == f"synthorg/{body['id']}"
    assert Path(workspace["path"]).is_dir() and Path(workspace["path"]) != repo
    assert "secrets" not in body


async def test_create_starts_by_default_and_runs_to_a_commit_with_views(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    response = await operator.post(
        "/api/conversations", json={"repository": str(repo), "prompt": "do it"}
    )
    assert response.status_code == 201
    cid = response.json()["id"]
    assert response.json()["status"] in {"created", "running"}
    done = await wait_status(operator, cid, "finished")
    assert done["termination_reason"] == "completed" and done["runs"] == 1
    assert done["commit_sha"] and done["loop_type"] == "react"
    assert done["usage"]["tokens_in"] > 0
    assert (Path(done["workspace"]["path"]) / "progress.txt").read_text() == "1\n2\n3\n"
    commits = (await operator.get(f"/api/conversations/{cid}/commits")).json()["items"]
    assert [c["sha"] for c in commits] == [done["commit_sha"]]
    changes = (await operator.get(f"/api/conversations/{cid}/changes")).json()["items"]
    assert [c["path"] for c in changes] == ["progress.txt"]
    log = [e["event"] for e in await events(operator, cid)]
    # A system note (e.g. "the sandbox is weaker than declared" on this host) may come first.
    kinds = [e["kind"] for e in log if not (e["kind"] == "message" and e["role"] == "system")]
    assert kinds[0] == "status_change" and kinds[-1] == "status_change"
    tools = [e["tool_name"] for e in log if e["kind"] == "action"]
    assert tools == ["terminal", "terminal", "terminal", "finish"]
    assert any("confirmed-3" in e["content"] for e in log if e["kind"] == "observation")


async def test_create_refuses_unknown_loop_and_bad_input(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    bad = await operator.post(
        "/api/conversations", json={"repository": str(repo), "prompt": "x", "loop": "nope"}
    )
    assert bad.status_code == 422
    empty = await operator.post("/api/conversations", json={"repository": str(repo), "prompt": ""})
    assert empty.status_code == 422
    missing = await operator.post(
        "/api/conversations", json={"repository": str(repo / "absent"), "prompt": "x"}
    )
    assert missing.status_code == 404  # well-formed, names no repository: as a missing object
    assert missing.json()["code"] == "not_found"


async def test_list_filters_and_cursor_pagination(operator: httpx.AsyncClient, repo: Path) -> None:
    made = [await create(operator, repo, project_id=f"p{i % 2}") for i in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = (await operator.get("/api/conversations", params=params)).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [c["id"] for c in reversed(made)]
    p1 = (await operator.get("/api/conversations", params={"project": "p1"})).json()
    assert {i["id"] for i in p1["items"]} == {
        c["id"] for c in made if c["task"]["project_id"] == "p1"
    }
    count = (await operator.get("/api/conversations/count", params={"project": "p0"})).json()
    assert count == {"count": 4}
    created = (await operator.get("/api/conversations/count", params={"status": "created"})).json()
    assert created == {"count": 7}
    none = (await operator.get("/api/conversations", params={"status": "running"})).json()
    assert none == {"items": [], "next_cursor": None}
    bad = await operator.get("/api/conversations", params={"cursor": "%%%"})
    assert bad.status_code == 422  # the schema states the cursor's shape


async def test_get_unknown_is_404(operator: httpx.AsyncClient) -> None:
    response = await operator.get("/api/conversations/conv-missing")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


_STILL_ACTIVE = "conversation {cid} is {status}: cancel or interrupt it before deleting"
"""The 409's detail for a delete while a run is in progress (what clients have been shown)."""


async def test_delete_removes_worktree_and_is_refused_while_running(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    body = await create(operator, repo, start=True, model="slow50")
    cid = body["id"]
    await wait_running(operator, cid)
    refused = await operator.delete(f"/api/conversations/{cid}")
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "conflict"
    assert refused.json()["detail"] == _STILL_ACTIVE.format(cid=cid, status="running")
    assert (await operator.post(f"/api/conversations/{cid}/cancel")).status_code == 200
    await wait_status(operator, cid, "cancelled")
    worktree = Path(body["workspace"]["path"])
    assert worktree.is_dir()
    deleted = await operator.delete(f"/api/conversations/{cid}")
    assert deleted.status_code == 200 and deleted.json() == {"id": cid, "deleted": True}
    assert not worktree.exists()
    assert (await operator.get(f"/api/conversations/{cid}")).status_code == 404
    assert (await operator.delete(f"/api/conversations/{cid}")).status_code == 404


async def test_delete_is_refused_while_the_record_says_a_run_is_in_progress_elsewhere(
    operator: httpx.AsyncClient, store: Store, repo: Path
) -> None:
    """No run here, but the record says one is in progress (another process holds it): the
    same 409 as for a run here, and nothing is removed."""
    body = await create(operator, repo, model="slow50")
    cid = body["id"]
    record = await store.get_conversation(cid)
    running = ConversationStatus.RUNNING
    await store.transition(
        record.model_copy(update={"status": running}),
        StatusChangeEvent(old=record.status, new=running),
    )
    refused = await operator.delete(f"/api/conversations/{cid}")
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "conflict"
    assert refused.json()["detail"] == _STILL_ACTIVE.format(cid=cid, status="running")
    assert Path(body["workspace"]["path"]).is_dir()
    assert (await operator.get(f"/api/conversations/{cid}")).status_code == 200
