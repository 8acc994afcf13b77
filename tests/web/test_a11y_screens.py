"""Accessibility (axe-core in the page: no serious or critical violation), the first page's
transfer budget (<= 300 KB), and the screenshots in docs/console/ (written when
SYNTHORG_CONSOLE_SCREENSHOTS names a directory: `SYNTHORG_CONSOLE_SCREENSHOTS=docs/console`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Keys
from .helpers import VIEWPORTS, axe, new_page, shoot, sign_in

pytestmark = pytest.mark.browser

FIRST_PAGE_BUDGET = 300 * 1024


async def test_accessibility_budget_and_screenshots(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    headers = {"Authorization": f"Bearer {keys.operator}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        done = (
            await client.post(
                "/api/conversations",
                json={"repository": str(repo), "prompt": "append three progress lines"},
            )
        ).json()["id"]
        waiting = (
            await client.post(
                "/api/conversations",
                json={
                    "repository": str(repo),
                    "prompt": "append progress, asking before every command",
                    "confirmation_policy": "always",
                },
            )
        ).json()["id"]

    page = await new_page(chrome, url, viewport=VIEWPORTS["desktop"])
    report: dict[str, list[dict[str, Any]]] = {}
    await page.wait_for_selector("#api-key")
    report["sign-in"] = await axe(page)
    await shoot(page, "sign-in")

    await sign_in(page, keys.admin)
    await page.wait_for_selector(f"tr[data-id='{done}'] td:has-text('finished')")
    transferred = await page.evaluate(
        "() => performance.getEntriesByType('navigation').concat("
        "performance.getEntriesByType('resource')).reduce((n, e) => n + e.transferSize, 0)"
    )
    print(f"first page transfer: {transferred} bytes")
    assert 0 < transferred <= FIRST_PAGE_BUDGET
    report["list"] = await axe(page)
    await shoot(page, "conversations")

    await page.goto(f"{url}/#/c/{waiting}")
    await page.wait_for_selector("[data-pending] button.approve")
    report["conversation"] = await axe(page)
    await shoot(page, "conversation-confirmation")

    await page.goto(f"{url}/#/c/{done}")
    await page.wait_for_selector(".ev.msg.finished")
    await shoot(page, "conversation-finished")
    await page.goto(f"{url}/#/c/{done}/changes")
    await page.wait_for_selector("#diff .d-add .tk-num")  # highlighted, as text spans
    await page.wait_for_selector("#checkpoints li:has-text('#0')")
    report["changes"] = await axe(page)
    await shoot(page, "changes")

    print("axe violations:", json.dumps(report, indent=1))
    serious = [
        (view, v)
        for view, found in report.items()
        for v in found
        if v["impact"] in ("serious", "critical")
    ]
    assert serious == []
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        await client.post(f"/api/conversations/{waiting}/cancel")
    await page.context.close()
