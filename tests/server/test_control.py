"""Messages, run control and confirmation through the API over the real LocalRunService:
bwrap sandbox, embedded gateway with a scripted model, native loop, worktree, commit gate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from .conftest import Keys, client_for
from .helpers import create, events, wait_running, wait_status

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


async def test_message_records_starts_then_steers_each_logged_once(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    """A message is logged exactly once however it is delivered (steered: 15.4)."""
    cid = (await create(operator, repo, model="slow50"))["id"]
    url = f"/api/conversations/{cid}/messages"
    recorded = await operator.post(url, json={"text": "just a note", "run": False})
    assert recorded.json() == {"conversation_id": cid, "delivery": "recorded"}
    started = await operator.post(url, json={"text": "go"})
    assert started.json()["delivery"] == "started"
    await wait_running(operator, cid)
    steered = await operator.post(url, json={"text": "also do this", "run": False})
    assert steered.json()["delivery"] == "steered"
    # Until the loop has read it: two more observations prove two more turns ran.
    seen = len(await events(operator, cid, kind="observation"))
    while len(await events(operator, cid, kind="observation")) < seen + 2:
        await asyncio.sleep(0.05)
    assert (await operator.post(f"/api/conversations/{cid}/cancel")).status_code == 200
    await wait_status(operator, cid, "cancelled")
    messages = [
        e["event"]["text"]
        for e in await events(operator, cid, kind="message")
        if e["event"]["role"] == "user"
    ]
    assert messages == ["just a note", "go", "also do this"]


async def test_second_concurrent_run_is_refused_never_wedged(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    cid = (await create(operator, repo, model="progress3"))["id"]
    results = await asyncio.gather(
        *(operator.post(f"/api/conversations/{cid}/resume") for _ in range(5))
    )
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 409, 409, 409, 409]
    assert "already" in next(r for r in results if r.status_code == 409).json()["detail"]
    done = await wait_status(operator, cid, "finished")
    assert done["runs"] == 1
    # Not wedged: a new run can start once the first one ended.
    assert (await operator.post(f"/api/conversations/{cid}/resume")).status_code == 200
    assert (await wait_status(operator, cid, "finished"))["runs"] == 2


async def test_pause_interrupt_resume_cancel_are_persisted_evented_and_attributed(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    cid = (await create(operator, repo, start=True, model="slow50"))["id"]
    base = f"/api/conversations/{cid}"
    await wait_running(operator, cid)
    pause = await operator.post(f"{base}/pause")
    assert pause.status_code == 200 and pause.json()["action"] == "pause"
    paused = await wait_status(operator, cid, "paused")
    assert paused["termination_reason"] == "paused"
    for action in ("pause", "interrupt", "cancel"):
        refused = await operator.post(f"{base}/{action}")
        assert refused.status_code == 409 and "no active run" in refused.json()["detail"]
    assert (await operator.post(f"{base}/resume")).json()["action"] == "resume"
    assert (await operator.post(f"{base}/resume")).status_code == 409
    await wait_running(operator, cid)
    interrupted = await operator.post(f"{base}/interrupt")
    assert interrupted.status_code == 200 and interrupted.json()["status"] == "paused"
    assert (await operator.post(f"{base}/resume")).status_code == 200
    await wait_running(operator, cid)
    cancelled = await operator.post(f"{base}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    final = await wait_status(operator, cid, "cancelled")
    assert final["runs"] == 3 and final["termination_reason"] == "cancelled"
    log = await events(operator, cid)
    statuses = [e["event"]["new"] for e in log if e["event"]["kind"] == "status_change"]
    assert [s for s in statuses if s != "created"] == [
        *("running", "paused", "running", "paused", "running", "cancelled")
    ]
    # Every command names who gave it, cancel included (15.7).
    controls = [
        (e["event"]["kind"], e["event"]["requested_by"])
        for e in log
        if e["event"]["kind"] in ("pause", "interrupt", "cancel")
    ]
    assert controls == [("pause", "olga"), ("interrupt", "olga"), ("cancel", "olga")]
    actions = {e["event"]["action_id"] for e in log if e["event"]["kind"] == "action"}
    observed = {e["event"]["action_id"] for e in log if e["event"]["kind"] == "observation"}
    assert actions <= observed, "an interrupted tool call is closed by an observation"
    assert (await operator.post("/api/conversations/conv-none/pause")).status_code == 404


async def test_resume_after_cancel_starts_a_new_run(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    """Decided (docs/server.md): cancel ends the *run* (status cancelled, nothing landed, never
    restarted by itself); only an explicit resume starts a new run of the conversation."""
    cid = (await create(operator, repo, start=True, model="slow50"))["id"]
    base = f"/api/conversations/{cid}"
    await wait_running(operator, cid)
    assert (await operator.post(f"{base}/cancel")).status_code == 200
    cancelled = await wait_status(operator, cid, "cancelled")
    assert cancelled["commit_sha"] is None and cancelled["runs"] == 1
    noted = await operator.post(f"{base}/messages", json={"text": "why", "run": False})
    assert noted.json()["delivery"] == "recorded"
    assert (await operator.get(base)).json()["status"] == "cancelled"
    resumed = await operator.post(f"{base}/resume")
    assert resumed.status_code == 200 and resumed.json()["action"] == "resume"
    await wait_running(operator, cid)
    assert (await operator.get(base)).json()["runs"] == 2
    assert (await operator.post(f"{base}/cancel")).status_code == 200
    await wait_status(operator, cid, "cancelled")


async def test_confirmation_by_id_records_the_approver_and_refuses_stale(
    app: FastAPI, keys: Keys, repo: Path
) -> None:
    async with (
        client_for(app, keys.operator) as operator,
        client_for(app, keys.approver) as approver,
    ):
        cid = (
            await create(
                operator, repo, start=True, model="progress3", confirmation_policy="always"
            )
        )["id"]
        other = (await create(operator, repo))["id"]
        url = f"/api/conversations/{cid}/confirmation"
        first = await next_pending(approver, cid, decided=set())
        pending = (await approver.get(url)).json()
        assert pending["request_seq"] > 0
        [action] = pending["pending"]
        assert action["action_id"] == first and action["tool_name"] == "terminal"
        assert "echo 1 >> progress.txt" in action["summary"]
        # The operator may not decide; an id from nowhere, or both lists, are refused.
        assert (await operator.post(url, json={"accepted": [first]})).status_code == 403
        unknown = await approver.post(url, json={"accepted": ["act-unknown"]})
        assert unknown.status_code == 409 and "not pending" in unknown.json()["detail"]
        assert (await approver.post(url, json={})).status_code == 422
        both = await approver.post(url, json={"accepted": [first], "rejected": [first]})
        assert both.status_code == 400
        elsewhere = await approver.post(
            f"/api/conversations/{other}/confirmation", json={"accepted": [first]}
        )
        assert elsewhere.status_code == 409
        ok = await approver.post(url, json={"accepted": [first], "reason": "fine"})
        assert ok.status_code == 200
        assert ok.json() == {
            "conversation_id": cid,
            "accepted": [first],
            "rejected": [],
            "approver": "abe",
        }
        assert (await approver.post(url, json={"accepted": [first]})).status_code == 409
        second = await next_pending(approver, cid, decided={first})
        rejected = await approver.post(url, json={"rejected": [second], "reason": "no"})
        assert rejected.status_code == 200
        decided = {first, second}
        # The script retries a rejected line: accept whatever follows until it finishes.
        while True:
            body = (await operator.get(f"/api/conversations/{cid}")).json()
            if body["status"] == "finished" and not body["active"]:
                break
            ids = [p["action_id"] for p in (await approver.get(url)).json()["pending"]]
            fresh = [i for i in ids if i not in decided]
            if fresh:
                await approver.post(url, json={"accepted": fresh})
                decided.update(fresh)
            await asyncio.sleep(0.02)
        decisions = [e["event"] for e in await events(operator, cid, kind="confirmation_decision")]
        assert decisions[:2] == [
            {**decisions[0], "accepted": [first], "rejected": [], "approver": "abe"},
            {**decisions[1], "accepted": [], "rejected": [second], "approver": "abe"},
        ]
        assert all(d["approver"] == "abe" for d in decisions)
        named = [tuple(d["accepted"] + d["rejected"]) for d in decisions]
        assert len(named) == len(set(named)), "each decision is recorded once"
        assert (await approver.get(url)).json()["pending"] == []
        assert (await approver.post(url, json={"accepted": [second]})).status_code == 409


async def next_pending(client: httpx.AsyncClient, cid: str, *, decided: set[str]) -> str:
    """The id of the next pending action not decided yet."""
    url = f"/api/conversations/{cid}/confirmation"
    for _ in range(3000):
        ids = [p["action_id"] for p in (await client.get(url)).json()["pending"]]
        fresh = [i for i in ids if i not in decided]
        if fresh:
            return fresh[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"{cid} never asked for confirmation")
