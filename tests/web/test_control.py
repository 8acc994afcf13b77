"""Run control and confirmation in the browser, by role: approve and reject by action id,
pause / resume / steer, and a viewer who sees no controls and whose forged calls are refused."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.engine.native.scripts import Tools
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage
from synthorg.service.boot import Components
from tests.server import real_scripts

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser


async def _create(url: str, key: str, repo: Path, **extra: Any) -> str:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        created = await c.post(
            "/api/conversations",
            json={"repository": str(repo), "prompt": "append progress", **extra},
        )
    assert created.status_code == 201, created.text
    conversation_id: str = created.json()["id"]
    return conversation_id


async def _events(url: str, key: str, conversation_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        page = await c.get(f"/api/conversations/{conversation_id}/events?limit=500")
    items: list[dict[str, Any]] = page.json()["items"]
    return [item["event"] for item in items]


async def test_approve_one_action_and_reject_another_by_id(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    conversation_id = await _create(url, keys.operator, repo, confirmation_policy="always")
    page = await new_page(chrome, url)
    await sign_in(page, keys.approver)
    await page.goto(f"{url}/#/c/{conversation_id}")
    assert await page.locator("#ctl-pause").count() == 0  # an approver is no operator

    first = page.locator("[data-pending]").first
    await first.wait_for()
    approved_id = await first.get_attribute("data-pending")
    assert await first.locator("pre.cmd").inner_text() != ""  # the exact command is shown
    await first.locator("button.approve").click()
    await page.wait_for_selector(f"[data-decision='{approved_id}']:has-text('approved by abe')")

    second = page.locator("[data-pending]").first
    await second.wait_for()
    rejected_id = await second.get_attribute("data-pending")
    assert rejected_id != approved_id
    await second.locator("button.reject").click()
    await page.wait_for_selector(f"[data-decision='{rejected_id}']:has-text('rejected by abe')")

    # "Approve all pending" is a separate, explicit button: it approves what waits now.
    third = page.locator("[data-pending]").first
    await third.wait_for()
    all_id = await third.get_attribute("data-pending")
    assert all_id not in (approved_id, rejected_id)
    await page.click("#approve-all")
    await page.wait_for_selector(f"[data-decision='{all_id}']:has-text('approved by abe')")

    # A stale decision (the action was decided already) is refused and the page says so.
    status = await page.evaluate(
        """async ([id, aid]) => {
            const s = await (await fetch('/console/session')).json();
            const r = await fetch(`/api/conversations/${id}/confirmation`, {method: 'POST',
              headers: {'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf},
              body: JSON.stringify({accepted: [aid]})});
            return r.status; }""",
        [conversation_id, approved_id],
    )
    assert status == 409

    decisions = [
        e
        for e in await _events(url, keys.operator, conversation_id)
        if e["kind"] == "confirmation_decision"
    ]
    assert {(tuple(d["accepted"]), tuple(d["rejected"]), d["approver"]) for d in decisions} >= {
        ((approved_id,), (), "abe"),
        ((), (rejected_id,), "abe"),
    }
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {keys.operator}"}
    ) as c:
        await c.post(f"/api/conversations/{conversation_id}/cancel")
    await page.context.close()


def _record_prompts(components: Components, model: str) -> list[list[str]]:
    """Serve ``model`` with its usual script, keeping the user messages of every request the
    model receives (what the gateway forwarded, not what the log says)."""
    provider = components.gateway.providers["scripted"]
    assert isinstance(provider, ScriptedProvider)
    script = real_scripts.slow50()
    received: list[list[str]] = []

    def recording(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
        received.append([str(m.content or "") for m in messages if m.role == "user"])
        return script(messages, tools)

    provider.set_script(model, recording)
    return received


def _steered(requests: list[list[str]]) -> bool:
    return any("please also write DONE at the end" in text for r in requests for text in r)


async def test_pause_resume_and_steer(
    url: str, keys: Keys, repo: Path, chrome: Any, components: Components
) -> None:
    received = _record_prompts(components, "slow50")
    conversation_id = await _create(url, keys.operator, repo, model="slow50")
    page = await new_page(chrome, url)
    await sign_in(page, keys.operator)
    await page.goto(f"{url}/#/c/{conversation_id}")
    await page.wait_for_selector("#conn.live")
    await page.wait_for_selector("#ctl-pause:enabled")

    await page.fill("#steer", "please also write DONE at the end")
    sent_at = len(received)
    await page.click("#steer-send")
    await page.wait_for_selector("#toast:has-text('message steered')")
    await page.wait_for_selector(".ev.msg.user:has-text('please also write DONE')")
    # A request the model received after the steer carries it (bounded wait on the condition).
    for _ in range(1200):
        if _steered(received[sent_at:]):
            break
        await asyncio.sleep(0.05)
    assert _steered(received[sent_at:]), received[sent_at:]
    assert not _steered(received[:sent_at])

    await page.click("#ctl-pause")
    await page.wait_for_selector(".ev:has-text('pause requested by olga')")
    await page.wait_for_selector("#conv-meta:has-text('paused')")
    await page.wait_for_selector("#ctl-resume:enabled")
    await page.click("#ctl-resume")
    await page.wait_for_selector("#conv-meta:has-text('running')")
    # Delete is refused while running, and the page says why. The running run's updates
    # redraw the controls between the two clicks: the armed Delete stays armed across that.
    await page.click("#ctl-delete")
    await page.evaluate("document.querySelector('#ctl-delete').dataset.drawn = 'before'")
    redrawn = "() => !document.querySelector('#ctl-delete').dataset.drawn"
    for _ in range(1200):  # polled: the console's CSP refuses wait_for_function's eval
        if await page.evaluate(redrawn):
            break
        await asyncio.sleep(0.1)
    assert await page.evaluate(redrawn), "the controls were never redrawn"
    await page.click("#ctl-delete:has-text('Confirm delete')")
    await page.wait_for_selector("#toast:has-text('Delete refused')")
    await page.wait_for_selector("#ctl-cancel:enabled")
    await page.click("#ctl-cancel")
    await page.wait_for_selector("#conv-meta:has-text('cancelled')")

    kinds = [e["kind"] for e in await _events(url, keys.operator, conversation_id)]
    assert "pause" in kinds and "cancel" in kinds
    steer = [
        e
        for e in await _events(url, keys.operator, conversation_id)
        if e["kind"] == "message" and "DONE" in e["text"]
    ]
    assert steer and steer[0]["role"] == "user"
    await page.click("#ctl-delete")
    await page.click("#ctl-delete:has-text('Confirm delete')")
    await page.wait_for_selector("#conversation-count")  # back on the list
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {keys.operator}"}
    ) as c:
        assert (await c.get(f"/api/conversations/{conversation_id}")).status_code == 404
    await page.context.close()


async def test_a_viewer_sees_no_controls_and_forged_calls_are_refused(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    conversation_id = await _create(url, keys.operator, repo, model="slow50")
    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.goto(f"{url}/#/c/{conversation_id}")
    await page.wait_for_selector("#conn.live")
    await page.wait_for_selector(".ev.action")
    assert await page.locator("#controls button").count() == 0
    assert await page.locator("#steer").count() == 0
    assert await page.locator("button.approve, button.reject").count() == 0
    # The server refuses what the page does not offer, CSRF token or not.
    statuses = await page.evaluate(
        """async (id) => {
            const s = await (await fetch('/console/session')).json();
            const out = [];
            for (const action of ['pause', 'cancel']) {
              const r = await fetch(`/api/conversations/${id}/${action}`,
                {method: 'POST', headers: {'X-CSRF-Token': s.csrf}});
              out.push(r.status);
            }
            const m = await fetch(`/api/conversations/${id}/messages`, {method: 'POST',
              headers: {'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf},
              body: JSON.stringify({text: 'hi'})});
            out.push(m.status);
            return out; }""",
        conversation_id,
    )
    assert statuses == [403, 403, 403]
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {keys.operator}"}
    ) as c:
        assert (await c.post(f"/api/conversations/{conversation_id}/cancel")).status_code == 200
    await page.context.close()


async def test_a_stale_decision_is_refused_and_the_page_says_so(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    import re

    conversation_id = await _create(url, keys.operator, repo, confirmation_policy="always")
    page = await new_page(chrome, url)

    # This page never hears of decisions made elsewhere (its socket drops them), so it
    # still offers a decision on an action someone else has already decided.
    async def deaf_to_decisions(ws: Any) -> None:
        server = ws.connect_to_server()
        ws.on_message(lambda message: server.send(message))
        server.on_message(
            lambda message: None if "confirmation_decision" in message else ws.send(message)
        )

    await page.route_web_socket(re.compile(r".*/events/ws.*"), deaf_to_decisions)
    await sign_in(page, keys.approver)
    await page.goto(f"{url}/#/c/{conversation_id}")
    box = page.locator("[data-pending]").first
    await box.wait_for()
    action_id = await box.get_attribute("data-pending")
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {keys.admin}"}
    ) as c:
        decided = await c.post(
            f"/api/conversations/{conversation_id}/confirmation", json={"accepted": [action_id]}
        )
        assert decided.status_code == 200
        await box.locator("button.approve").click()
        await page.wait_for_selector(
            f"[data-pending='{action_id}'] .decision-error:has-text('the run has moved on')"
        )
        await page.wait_for_selector("#toast:has-text('stale')")
        await c.post(f"/api/conversations/{conversation_id}/cancel")
    await page.context.close()
