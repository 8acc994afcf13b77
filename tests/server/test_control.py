"""Messages, run control and confirmation through the API, in-process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from fastapi import FastAPI

from .conftest import Keys, client_for
from .helpers import create, events, wait_status
from .scripted_service import ScriptedRunService


def kinds(items: list[dict[str, object]]) -> list[str]:
    return [str(e["event"]["kind"]) for e in items]  # type: ignore[index]


async def test_message_records_starts_then_steers(
    operator: httpx.AsyncClient, repo: Path, service: ScriptedRunService
) -> None:
    service.delay = 0.2
    cid = (await create(operator, repo))["id"]
    url = f"/api/conversations/{cid}/messages"
    recorded = await operator.post(url, json={"text": "just a note", "run": False})
    assert recorded.json() == {"conversation_id": cid, "delivery": "recorded"}
    started = await operator.post(url, json={"text": "go"})
    assert started.json()["delivery"] == "started"
    steered = await operator.post(url, json={"text": "also do this", "run": False})
    assert steered.json()["delivery"] == "steered"
    await wait_status(operator, cid, "finished")
    messages = [e["event"]["text"] for e in await events(operator, cid, kind="message")]
    assert messages == ["just a note", "go", "also do this"]


async def test_second_concurrent_run_is_refused_never_wedged(
    operator: httpx.AsyncClient, repo: Path, service: ScriptedRunService
) -> None:
    service.delay = 0.2
    cid = (await create(operator, repo))["id"]
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


async def test_pause_interrupt_resume_cancel_transitions_are_persisted_and_evented(
    operator: httpx.AsyncClient, repo: Path, service: ScriptedRunService
) -> None:
    service.delay = 0.3
    service.turns = 50
    cid = (await create(operator, repo, start=True))["id"]
    base = f"/api/conversations/{cid}"
    pause = await operator.post(f"{base}/pause")
    assert pause.status_code == 200 and pause.json()["action"] == "pause"
    paused = await wait_status(operator, cid, "paused")
    assert paused["termination_reason"] == "paused"
    for action in ("pause", "interrupt", "cancel"):
        refused = await operator.post(f"{base}/{action}")
        assert refused.status_code == 409 and "no active run" in refused.json()["detail"]
    assert (await operator.post(f"{base}/resume")).json()["action"] == "resume"
    assert (await operator.post(f"{base}/resume")).status_code == 409
    interrupted = await operator.post(f"{base}/interrupt")
    assert interrupted.status_code == 200 and interrupted.json()["status"] == "paused"
    assert (await operator.post(f"{base}/resume")).status_code == 200
    cancelled = await operator.post(f"{base}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    final = await wait_status(operator, cid, "cancelled")
    assert final["runs"] == 3 and final["termination_reason"] == "cancelled"
    log = await events(operator, cid)
    statuses = [e["event"]["new"] for e in log if e["event"]["kind"] == "status_change"]
    assert statuses == ["created", "running", "paused", "running", "paused", "running", "cancelled"]
    assert [
        e["event"]["requested_by"] for e in log if e["event"]["kind"] in ("pause", "interrupt")
    ] == [
        "olga",
        "olga",
    ]
    assert (await operator.post("/api/conversations/conv-none/pause")).status_code == 404


async def test_confirmation_by_id_records_the_approver_and_refuses_stale(
    app: FastAPI, keys: Keys, repo: Path, service: ScriptedRunService
) -> None:
    service.turns = 2
    async with (
        client_for(app, keys.operator) as operator,
        client_for(app, keys.approver) as approver,
    ):
        cid = (await create(operator, repo, start=True, confirmation_policy="always"))["id"]
        other = (await create(operator, repo))["id"]
        url = f"/api/conversations/{cid}/confirmation"
        await wait_status_active(operator, cid, "waiting_confirmation")
        pending = (await approver.get(url)).json()
        assert pending["status"] == "waiting_confirmation" and pending["request_seq"] > 0
        [action] = pending["pending"]
        assert action["tool_name"] == "terminal" and action["risk"] == "high"
        assert action["summary"] == "append 0 to progress.txt"
        first = action["action_id"]
        # The operator may not decide; an id from nowhere, or both lists, are refused.
        assert (await operator.post(url, json={"accepted": [first]})).status_code == 403
        unknown = await approver.post(url, json={"accepted": ["act-unknown"]})
        assert unknown.status_code == 409 and "not pending" in unknown.json()["detail"]
        assert (await approver.post(url, json={})).status_code == 400
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
        stale = await approver.post(url, json={"accepted": [first]})
        assert stale.status_code == 409
        await wait_status_active(operator, cid, "waiting_confirmation", not_id=first)
        second = (await approver.get(url)).json()["pending"][0]["action_id"]
        assert second != first
        rejected = await approver.post(url, json={"rejected": [second], "reason": "no"})
        assert rejected.status_code == 200
        await wait_status(operator, cid, "finished")
        decisions = [e["event"] for e in await events(operator, cid, kind="confirmation_decision")]
        assert [(d["accepted"], d["rejected"], d["approver"]) for d in decisions] == [
            ([first], [], "abe"),
            ([], [second], "abe"),
        ]
        assert (await approver.get(url)).json()["pending"] == []
        late = await approver.post(url, json={"accepted": [second]})
        assert late.status_code == 409


async def wait_status_active(
    client: httpx.AsyncClient, cid: str, status: str, *, not_id: str | None = None
) -> None:
    for _ in range(1000):
        body = (await client.get(f"/api/conversations/{cid}")).json()
        if body["status"] == status:
            pending = (await client.get(f"/api/conversations/{cid}/confirmation")).json()
            ids = [p["action_id"] for p in pending["pending"]]
            if ids and not_id not in ids:
                return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{cid} never reached {status}")
