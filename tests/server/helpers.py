"""Small helpers shared by the server tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from synthorg.domain import MessageEvent
from synthorg.store.protocol import ConversationStore
from synthorg.workspace.git import run_git_sync
from tests.support import IDENTITY


def make_repo(path: Path, files: dict[str, bytes]) -> None:
    """A fresh repository at ``path`` with ``files`` committed on main."""
    path.mkdir(parents=True, exist_ok=True)
    run_git_sync(["init", "-q", "-b", "main"], path)
    for rel, content in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(content)
    run_git_sync(["add", "-A"], path)
    run_git_sync(["commit", "-q", "-m", "initial"], path, env=IDENTITY)


async def create(
    client: httpx.AsyncClient, repo: object, *, start: bool = False, **extra: Any
) -> dict[str, Any]:
    """Create a conversation through the API; returns its view."""
    response = await client.post(
        "/api/conversations",
        json={"repository": str(repo), "prompt": "append progress", "start": start, **extra},
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def wait_status(
    client: httpx.AsyncClient, conversation_id: str, *wanted: str, timeout: float = 60
) -> dict[str, Any]:
    """Poll until the conversation has one of ``wanted`` statuses and no active run."""
    deadline = asyncio.get_running_loop().time() + timeout
    body: dict[str, Any] = {}
    while asyncio.get_running_loop().time() < deadline:
        body = (await client.get(f"/api/conversations/{conversation_id}")).json()
        if body["status"] in wanted and not body["active"]:
            return body
        await asyncio.sleep(0.02)
    raise AssertionError(f"status stayed {body.get('status')}, wanted {wanted}")


async def until_metric(base_url: str, line: str, timeout: float = 60) -> None:
    """Until the server's ``/metrics`` has ``line`` (e.g. ``synthorg_ws_connections 4.0``)."""
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=timeout) as client,
        asyncio.timeout(timeout),
    ):
        while line not in (await client.get("/metrics")).text.splitlines():
            await asyncio.sleep(0.02)  # a poll interval: a gauge has no wake-up to wait on


async def events(
    client: httpx.AsyncClient, conversation_id: str, **params: Any
) -> list[dict[str, Any]]:
    """Every event of the conversation (following pages)."""
    items: list[dict[str, Any]] = []
    after = 0
    while True:
        page = (
            await client.get(
                f"/api/conversations/{conversation_id}/events",
                params={"after": after, "limit": 200, **params},
            )
        ).json()
        items.extend(page["items"])
        if page["next_after"] is None:
            return items
        after = page["next_after"]


async def wait_running(client: httpx.AsyncClient, cid: str, timeout: float = 60) -> None:
    """Until the run's loop is working: running, with an observation logged after this run
    started (so a turn of this run has completed)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        body = (await client.get(f"/api/conversations/{cid}")).json()
        if body["status"] == "running":
            logged = await events(client, cid)
            starts = [
                e["seq"]
                for e in logged
                if e["event"]["kind"] == "status_change" and e["event"]["reason"] == "run started"
            ]
            if starts and any(
                e["event"]["kind"] == "observation" and e["seq"] > starts[-1] for e in logged
            ):
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{cid} never started running")


async def with_first_event(store: ConversationStore, conversation_id: str) -> None:
    """Make sure seq 1 exists (creation may or may not log a status change), so tests can
    count seqs from 1."""
    if await store.last_seq(conversation_id) == 0:
        await store.append(conversation_id, MessageEvent(role="system", text="opened"))


async def seed_conversations(
    store: ConversationStore, prompts: list[str], *, project: str = "project"
) -> list[str]:
    """Conversation rows straight into the store (no worktree), one second apart in the
    order given (the last is the newest); their ids."""
    import secrets
    from datetime import UTC, datetime, timedelta

    from synthorg.domain import AgentIdentity, ConversationRecord, Task

    base = datetime(2030, 1, 1, tzinfo=UTC)
    batch = secrets.token_hex(4)
    records = [
        ConversationRecord(
            id=f"seed-{batch}-{i:05d}",
            task=Task(id=f"t-{i:05d}", project_id=project, prompt=prompt, repository="/r"),
            agent=AgentIdentity(id="agent-1"),
            loop_type="react",
            model="progress3",
            created_at=base + timedelta(seconds=i),
            updated_at=base + timedelta(seconds=i),
        )
        for i, prompt in enumerate(prompts)
    ]
    for start in range(0, len(records), 500):
        await asyncio.gather(*(store.create_conversation(r) for r in records[start : start + 500]))
    return [r.id for r in records]
