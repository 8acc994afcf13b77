"""Small helpers of the browser tests."""

from __future__ import annotations

from typing import Any

DEADLINE_MS = 60_000
"""Generous: the machine is shared; every wait is on a condition, never a sleep."""


async def new_page(browser: Any, base: str, **options: Any) -> Any:
    """A fresh browser context (its own cookies) and a page at ``base``."""
    context = await browser.new_context(**options)
    context.set_default_timeout(DEADLINE_MS)
    page = await context.new_page()
    await page.goto(base + "/")
    return page


async def sign_in(page: Any, key: str) -> None:
    """Sign in through the form; wait for the signed-in header."""
    await page.fill("#api-key", key)
    await page.click("form button[type=submit]")
    await page.wait_for_selector("#sign-out")


async def rendered_seqs(page: Any) -> list[int]:
    """The seq of every event the page rendered, in document order."""
    values: list[str] = await page.eval_on_selector_all(
        "#events [data-seq]", "els => els.map(e => e.dataset.seq)"
    )
    return [int(v) for v in values]


async def api_last_seq(base: str, key: str, conversation_id: str) -> int:
    """The conversation's highest seq, as the API says."""
    import httpx

    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
        page = await c.get(f"/api/conversations/{conversation_id}/events?limit=1")
    value: int = page.json()["last_seq"]
    return value
