"""Rollback to a checkpoint from the Changes tab: an operator confirms and the worktree is
restored; a viewer is offered no button."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser


async def _finished(url: str, key: str, repo: Path) -> tuple[str, Path]:
    """A conversation whose run (three commands, so checkpoints) has finished."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        created = await c.post(
            "/api/conversations",
            json={
                "repository": str(repo),
                "prompt": "append progress",
                "model": "progress3",
                "start": True,
            },
        )
        assert created.status_code == 201, created.text
        cid: str = created.json()["id"]
        deadline = asyncio.get_running_loop().time() + 120
        while asyncio.get_running_loop().time() < deadline:
            body = (await c.get(f"/api/conversations/{cid}")).json()
            if body["status"] == "finished" and not body["active"]:
                return cid, Path(created.json()["workspace"]["path"])
            await asyncio.sleep(0.05)
    raise AssertionError(f"{cid} did not finish: {body.get('status')}")


async def test_an_operator_rolls_back_and_a_viewer_sees_no_button(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    cid, worktree = await _finished(url, keys.operator, repo)
    assert (worktree / "progress.txt").exists()
    viewer = await new_page(chrome, url)
    await sign_in(viewer, keys.viewer)
    await viewer.goto(f"{url}/#/c/{cid}/changes")
    await viewer.wait_for_selector("#checkpoints li:has-text('#0')")
    assert await viewer.locator("#checkpoints button").count() == 0
    await viewer.context.close()

    page = await new_page(chrome, url)
    await sign_in(page, keys.operator)
    await page.goto(f"{url}/#/c/{cid}/changes")
    prompts: list[str] = []

    async def accept(dialog: Any) -> None:
        prompts.append(dialog.message)
        await dialog.accept()

    page.on("dialog", accept)
    await page.click("#rollback-0")
    await page.wait_for_selector("#toast:has-text('rolled back to checkpoint #0')")
    assert prompts and "checkpoint #0" in prompts[0]
    assert not (worktree / "progress.txt").exists()
    await page.context.close()
