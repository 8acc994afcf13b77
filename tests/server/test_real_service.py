"""Runs and their control through the API over the real LocalRunService: bwrap sandbox,
embedded gateway with a scripted model, native loop, worktree, commit gate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from .conftest import Keys, client_for
from .helpers import create, events, wait_status

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


async def wait_running(client: httpx.AsyncClient, cid: str) -> None:
    """Until the run has started its loop (and written at least one observation)."""
    for _ in range(1500):
        body = (await client.get(f"/api/conversations/{cid}")).json()
        if body["status"] == "running":
            seen = await events(client, cid, kind="observation")
            if len(seen) > body["turns"]:
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{cid} never started running")


async def test_run_to_a_commit_with_views(real: FastAPI, keys: Keys, repo: Path) -> None:
    async with client_for(real, keys.operator) as client:
        body = await create(client, repo, start=True, model="progress3")
        cid = body["id"]
        done = await wait_status(client, cid, "finished", timeout=60)
        assert done["termination_reason"] == "completed" and done["commit_sha"]
        assert done["loop_type"] == "react" and done["usage"]["tokens_in"] > 0
        worktree = Path(done["workspace"]["path"])
        assert (worktree / "progress.txt").read_text() == "1\n2\n3\n"
        commits = (await client.get(f"/api/conversations/{cid}/commits")).json()["items"]
        assert [c["sha"] for c in commits] == [done["commit_sha"]]
        assert (await client.get(f"/api/conversations/{cid}/changes")).json()["items"][0][
            "path"
        ] == "progress.txt"
        log = await events(client, cid)
        tools = [e["event"]["tool_name"] for e in log if e["event"]["kind"] == "action"]
        assert tools.count("terminal") == 3
        outputs = [e["event"] for e in log if e["event"]["kind"] == "observation"]
        assert any("confirmed-3" in o["content"] for o in outputs)


async def test_steer_and_concurrent_start_refused(real: FastAPI, keys: Keys, repo: Path) -> None:
    async with client_for(real, keys.operator) as client:
        cid = (await create(client, repo, model="slow50"))["id"]
        results = await asyncio.gather(
            *(client.post(f"/api/conversations/{cid}/resume") for _ in range(4))
        )
        assert sorted(r.status_code for r in results) == [200, 409, 409, 409]
        await wait_running(client, cid)
        steer = await client.post(f"/api/conversations/{cid}/messages", json={"text": "hurry"})
        assert steer.json()["delivery"] == "steered"
        cancelled = await client.post(f"/api/conversations/{cid}/cancel")
        assert cancelled.status_code == 200
        final = await wait_status(client, cid, "cancelled", timeout=30)
        assert final["runs"] == 1
        texts = [e["event"]["text"] for e in await events(client, cid, kind="message")]
        assert "hurry" in texts


async def test_pause_interrupt_resume_cancel(real: FastAPI, keys: Keys, repo: Path) -> None:
    async with client_for(real, keys.operator) as client:
        cid = (await create(client, repo, start=True, model="slow50"))["id"]
        base = f"/api/conversations/{cid}"
        await wait_running(client, cid)
        assert (await client.post(f"{base}/pause")).status_code == 200
        paused = await wait_status(client, cid, "paused", timeout=30)
        assert paused["termination_reason"] == "paused"
        assert (await client.post(f"{base}/pause")).status_code == 409
        assert (await client.post(f"{base}/resume")).status_code == 200
        await wait_running(client, cid)
        assert (await client.post(f"{base}/interrupt")).json()["status"] == "paused"
        assert (await client.post(f"{base}/resume")).status_code == 200
        await wait_running(client, cid)
        assert (await client.post(f"{base}/cancel")).json()["status"] == "cancelled"
        final = await wait_status(client, cid, "cancelled", timeout=30)
        assert final["runs"] == 3
        log = await events(client, cid)
        statuses = [e["event"]["new"] for e in log if e["event"]["kind"] == "status_change"]
        assert statuses[-6:] == ["running", "paused", "running", "paused", "running", "cancelled"]


async def test_interrupt_leaves_no_dangling_action(real: FastAPI, keys: Keys, repo: Path) -> None:
    async with client_for(real, keys.operator) as client:
        cid = (await create(client, repo, start=True, model="slow50"))["id"]
        await wait_running(client, cid)
        await asyncio.sleep(0.15)  # inside the 0.3 s command
        assert (await client.post(f"/api/conversations/{cid}/interrupt")).status_code == 200
        await wait_status(client, cid, "paused", timeout=30)
        log = await events(client, cid)
        actions = {e["event"]["action_id"] for e in log if e["event"]["kind"] == "action"}
        observed = {e["event"]["action_id"] for e in log if e["event"]["kind"] == "observation"}
        assert actions <= observed


async def test_confirmation_with_the_real_loop(real: FastAPI, keys: Keys, repo: Path) -> None:
    async with (
        client_for(real, keys.operator) as operator,
        client_for(real, keys.approver) as approver,
    ):
        cid = (
            await create(
                operator, repo, start=True, model="progress3", confirmation_policy="always"
            )
        )["id"]
        url = f"/api/conversations/{cid}/confirmation"
        decided: list[str] = []
        for turn in range(3):
            pending: list[dict[str, str]] = []
            for _ in range(600):
                pending = (await approver.get(url)).json()["pending"]
                if pending and pending[0]["action_id"] not in decided:
                    break
                await asyncio.sleep(0.02)
            [action] = pending
            assert action["tool_name"] == "terminal"
            if decided:
                stale = await approver.post(url, json={"accepted": [decided[-1]]})
                assert stale.status_code == 409
            verdict = (
                {"accepted": [action["action_id"]]}
                if turn != 1
                else {
                    "rejected": [action["action_id"]],
                    "reason": "not that one",
                }
            )
            response = await approver.post(url, json=verdict)
            assert response.status_code == 200 and response.json()["approver"] == "abe"
            decided.append(action["action_id"])
        await approver.post(url, json={"accepted": ["nothing-pending"]})
        # A rejected line is retried by the script, so a fourth confirmation follows.
        for _ in range(600):
            pending = (await approver.get(url)).json()["pending"]
            if pending and pending[0]["action_id"] not in decided:
                await approver.post(url, json={"accepted": [pending[0]["action_id"]]})
                decided.append(pending[0]["action_id"])
            body = (await operator.get(f"/api/conversations/{cid}")).json()
            if body["status"] == "finished" and not body["active"]:
                break
            await asyncio.sleep(0.02)
        decisions = [e["event"] for e in await events(operator, cid, kind="confirmation_decision")]
        assert all(d["approver"] == "abe" for d in decisions)
        named = [tuple(d["accepted"] + d["rejected"]) for d in decisions]
        assert {n[0] for n in named} == set(decided)
        assert len(named) == len(set(named)), "each decision is recorded once"
