"""Usability of the console: a revoked key leaves no control on screen, a delegated run is
marked as its parent's sub-run in the list, and talking to the agent is a labelled input of
its own (Ctrl+Enter sends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.server import KeyStore, Role
from synthorg.store import Store

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser


async def _create(url: str, key: str, repo: Path, prompt: str) -> str:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        created = await c.post(
            "/api/conversations", json={"repository": str(repo), "prompt": prompt, "start": False}
        )
    assert created.status_code == 201, created.text
    cid: str = created.json()["id"]
    return cid


async def test_a_revoked_key_leaves_no_control_on_screen(
    url: str, keys: Keys, repo: Path, key_store: KeyStore, chrome: Any
) -> None:
    record, key = key_store.create("otto", {Role.OPERATOR})
    cid = await _create(url, keys.operator, repo, "a task")
    page = await new_page(chrome, url)
    await sign_in(page, key)
    await page.goto(f"{url}/#/c/{cid}")
    await page.wait_for_selector("#ctl-delete")
    await page.wait_for_selector("#conn.live")
    key_store.revoke(record.id)
    # The socket's re-check refuses the key; the page then drops every control.
    await page.wait_for_selector("#api-key")
    assert await page.locator("#ctl-delete, #steer, #ctl-resume").count() == 0
    assert "no longer valid" in await page.inner_text("#sign-in-error")
    await page.context.close()


async def test_sub_runs_are_marked_and_the_message_box_is_first_class(
    url: str, keys: Keys, repo: Path, store: Store, chrome: Any
) -> None:
    parent = await _create(url, keys.operator, repo, "the parent task")
    child = await _create(url, keys.operator, repo, "the child task")
    record = await store.get_conversation(child)
    await store.save_conversation(
        record.model_copy(update={"parent_id": parent, "root_id": parent})
    )
    page = await new_page(chrome, url)
    await sign_in(page, keys.operator)
    row = page.locator(f"tr[data-id='{child}']")
    await row.locator(".sub-run").wait_for()
    assert f"sub-run of {parent}" in await row.locator(".sub-run").inner_text()
    assert await page.locator(f"tr[data-id='{parent}'] .sub-run").count() == 0

    await page.goto(f"{url}/#/c/{parent}")
    await page.wait_for_selector("#usage:has-text('cost')")
    assert "null" not in await page.inner_text("#usage")  # no budget: nothing after the cost
    label = page.locator("label[for='steer']")
    assert await label.inner_text() == "Message the agent"
    assert await label.is_visible()
    box = page.locator("#steer")
    assert int(await box.get_attribute("rows") or 0) >= 3
    await box.fill("please start with the README")
    await box.press("Control+Enter")
    await page.wait_for_selector("#toast:has-text('message')")
    await page.context.close()
