"""Small helpers of the browser tests."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synthorg.gateway.scripted import ScriptedTurn
    from synthorg.service.boot import Components

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


async def open_conversation(browser: Any, base: str, key: str, conversation_id: str) -> Any:
    """A fresh page signed in with ``key``, at the conversation's view."""
    page = await new_page(browser, base)
    await sign_in(page, key)
    await page.goto(f"{base}/#/c/{conversation_id}")
    return page


async def rendered_seqs(page: Any) -> list[int]:
    """The seq of every event the page rendered, in document order."""
    values: list[str] = await page.eval_on_selector_all(
        "#events [data-seq]", "els => els.map(e => e.dataset.seq)"
    )
    return [int(v) for v in values]


async def api_last_seq(base: str, key: str, conversation_id: str) -> int:
    """The conversation's highest seq, as the API says."""
    import httpx

    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as c:  # a machine at load 25 can take seconds to answer
        page = await c.get(f"/api/conversations/{conversation_id}/events?limit=1")
    value: int = page.json()["last_seq"]
    return value


AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


async def axe(page: Any) -> list[dict[str, Any]]:
    """Run axe-core in the page (evaluated over the DevTools protocol: the CSP stays on)."""
    if not await page.evaluate("() => typeof window.axe !== 'undefined'"):
        await page.evaluate(AXE.read_text(encoding="utf-8"))
    result = await page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help, "
        "nodes: v.nodes.map(n => n.target.join(' ') + ' ' + (n.any[0] || {}).message)"
        ".slice(0, 5)}))"
    )
    violations: list[dict[str, Any]] = result
    return violations


async def shoot(page: Any, name: str) -> None:
    """Screenshots at both viewports into $SYNTHORG_CONSOLE_SCREENSHOTS, when it is set."""
    target = os.environ.get("SYNTHORG_CONSOLE_SCREENSHOTS")
    if not target:
        return
    for label, size in VIEWPORTS.items():
        await page.set_viewport_size(size)
        await page.screenshot(path=str(Path(target) / f"{name}-{label}.png"))
    await page.set_viewport_size(VIEWPORTS["desktop"])


async def start_scripted(
    base: str,
    key: str,
    repo: Path,
    components: Components,
    turns: Sequence[ScriptedTurn],
    **extra: Any,
) -> str:
    """Start a run whose model plays ``turns`` (one per tool result in its history), then
    finishes; returns the conversation id. Served as the ``progress3`` model."""
    import httpx

    from synthorg.engine.native.scripts import steps_of
    from synthorg.gateway.providers.scripted import ScriptedProvider
    from synthorg.gateway.scripted import ScriptedTurn

    def script(messages: Any, tools: Any) -> ScriptedTurn:
        done = [s for s in steps_of(messages) if s.result is not None]
        return (
            turns[len(done)]
            if len(done) < len(turns)
            else ScriptedTurn.call("finish", message="done")
        )

    provider = components.gateway.providers["scripted"]
    assert isinstance(provider, ScriptedProvider)
    provider.set_script("progress3", script)
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as c:  # a machine at load 25 can take seconds to answer
        created = await c.post(
            "/api/conversations",
            json={
                "repository": str(repo),
                "prompt": "do what the script says",
                "model": "progress3",
                **extra,
            },
        )
    assert created.status_code == 201, created.text
    conversation_id: str = created.json()["id"]
    return conversation_id
