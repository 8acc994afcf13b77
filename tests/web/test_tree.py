"""The delegation tree in the browser, with a real delegating run (the delegation tests'
script, bwrap sandboxes, worktrees, the host merge): the parent's page lists its children
with status and cost and links, a child's confirmation surfaces there under the child's id
and is decided by that id, and the child's page links back to its parent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.server import ServerSettings
from synthorg.service.boot import Components
from synthorg.settings import Settings
from tests.delegation.scripts import delegate, delegating, edit
from tests.server.real_stack import real_stack, stack_settings

from .conftest import Keys
from .helpers import axe, new_page, shoot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.bwrap]

MODEL = "progress3"


@pytest.fixture
async def components(
    home: Path, settings: ServerSettings, _scripts_importable: None
) -> AsyncIterator[Components]:
    """The real stack, its model priced (so spend shows) and scripted to delegate."""
    stack = stack_settings(home)
    gateway = {
        **stack.sections["gateway"],
        "prices": {MODEL: {"input_per_mtok_usd": 3, "output_per_mtok_usd": 15}},
    }
    priced = Settings(home=home, sections={**stack.sections, "gateway": gateway})
    async with real_stack(priced, repositories=settings.repository_policy(priced)) as wired:
        provider = wired.gateway.providers["scripted"]
        assert isinstance(provider, ScriptedProvider)
        provider.set_script(MODEL, delegating)
        yield wired


async def _api(url: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"})


async def test_a_parent_shows_its_children_and_their_confirmations(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    prompt = delegate(
        {"prompt": edit("README.md", "hello\n", "HELLO\n")},
        {"prompt": edit("src/app.py", "print('hi')\n", "print('HI')\n")},
    )
    async with await _api(url, keys.operator) as operator:
        created = await operator.post(
            "/api/conversations",
            json={"repository": str(repo), "prompt": prompt, "confirmation_policy": "always"},
        )
        assert created.status_code == 201, created.text
    parent = created.json()["id"]

    page = await new_page(chrome, url)
    await sign_in(page, keys.approver)
    await page.goto(f"{url}/#/c/{parent}")
    # The parent's own delegate call waits first: approved inline, by its action id.
    await page.locator("#events [data-pending] button.approve").click()

    # Each child's edit waits under the child's id, on the parent's page; decided there.
    for turn in range(2):
        pending = page.locator("#tree li.child-pending").first
        await pending.wait_for()
        if turn == 0:
            await page.evaluate("() => window.scrollTo(0, 0)")
            await shoot(page, "delegation")
            assert [v for v in await axe(page) if v["impact"] in ("serious", "critical")] == []
        text = await pending.text_content() or ""
        child = text.split(" waits for approval", 1)[0]
        assert child.startswith("conv") and child != parent, text
        await page.locator(f"#tree li.child[data-child='{child}']").wait_for()
        await pending.locator("button.approve").click()
        await page.locator(f"#tree li.child[data-child='{child}'] li.child-pending").wait_for(
            state="detached"
        )

    await page.wait_for_selector("#conv-meta:has-text('finished')")
    async with await _api(url, keys.viewer) as viewer:
        tree = (await viewer.get(f"/api/conversations/{parent}/tree")).json()
        children = [c["id"] for c in tree["children"]]
        assert len(children) == 2
        for child in children:
            history = (await viewer.get(f"/api/conversations/{child}/events?limit=500")).json()
            decisions = [
                e["event"]
                for e in history["items"]
                if e["event"]["kind"] == "confirmation_decision"
            ]
            assert decisions and all(d["approver"] == "abe" for d in decisions), decisions
    for child in children:
        row = page.locator(f"#tree li.child[data-child='{child}']")
        await row.locator(".status:has-text('finished')").wait_for()
        node = next(c for c in tree["children"] if c["id"] == child)
        assert Decimal(node["cost_usd"]) > 0
        assert f"own ${float(node['cost_usd']):.4f}" in (await row.text_content() or "")
    summary = await page.locator("#tree").text_content() or ""
    assert f"tree ${float(tree['tree_cost_usd']):.4f}" in summary
    violations = [v for v in await axe(page) if v["impact"] in ("serious", "critical")]
    assert violations == [], json.dumps(violations, indent=1)
    assert "null" not in summary

    # The child's page links back to its parent.
    await page.locator(f"#tree li.child[data-child='{children[0]}'] > a").click()
    await page.wait_for_url(f"**/#/c/{children[0]}")
    await page.locator(f"#tree-parent a[href='#/c/{parent}']").wait_for()
    await page.context.close()
