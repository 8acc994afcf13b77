"""Hostile strings from a model, a tool or a repository are shown as inert text: HTML and
javascript: links stay text, terminal escapes (OSC 52 clipboard writes, title changes, cursor
movement, 8-bit C1 controls) are dropped, colours survive as classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.domain import ActionEvent, MessageEvent, ObservationEvent, RiskLevel
from synthorg.store import Store

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser

SCRIPT = "<script>window.__pwned = 'script'</script>"
IMG = "<img src=x onerror=\"window.__pwned = 'img'\">"
LINK = (
    "[click me](javascript:window.__pwned='link') <a href=\"javascript:window.__pwned='a'\">a</a>"
)
TERMINAL = (
    "\x1b[31mred\x1b[0m plain \x1b[1;32mbold green\x1b[0m\n"
    "\x1b]52;c;ZXZpbCBjbGlwYm9hcmQ=\x07"  # OSC 52: write the clipboard
    "\x1b]0;PWNED-TITLE\x07"  # set the window title
    "\x1b]8;;javascript:window.__pwned='osc8'\x1b\\hyperlink\x1b]8;;\x1b\\"  # OSC 8 link
    "\x1b[2J\x1b[H\x1b[10;10f"  # erase screen, cursor home, cursor position
    "\x9b31mC1-CSI\x9b0m \x9d0;C1-TITLE\x9c"  # 8-bit CSI and OSC
    "\x1bPdcs-payload\x1b\\\x07\x08end"
)


async def test_hostile_strings_are_inert(
    url: str, keys: Keys, repo: Path, store: Store, chrome: Any
) -> None:
    headers = {"Authorization": f"Bearer {keys.operator}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        created = await client.post(
            "/api/conversations",
            json={"repository": str(repo), "prompt": f"task {SCRIPT} {IMG}", "start": False},
        )
    conversation_id = created.json()["id"]
    await store.append(conversation_id, MessageEvent(role="assistant", text=f"{SCRIPT} {LINK}"))
    action = ActionEvent(
        action_id="act-hostile",
        tool_name=f"terminal{IMG}",
        arguments={"command": SCRIPT},
        summary=f"{IMG} {LINK}",
        thought=SCRIPT,
        risk=RiskLevel.HIGH,
    )
    await store.append(conversation_id, action)
    await store.append(
        conversation_id, ObservationEvent(action_id="act-hostile", content=TERMINAL, exit_code=0)
    )

    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.wait_for_selector("td.task a")  # the prompt in the list, as text
    await page.goto(f"{url}/#/c/{conversation_id}")
    await page.wait_for_selector("#events .obs pre.term")

    text = await page.inner_text("main")
    assert "<script>window.__pwned" in text and "onerror=" in text  # shown, as text
    assert await page.evaluate("() => window.__pwned") is None
    assert await page.locator("main script, main img, main iframe, main object").count() == 0
    hrefs = await page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    assert all(not href.lower().startswith("javascript:") for href in hrefs)
    assert await page.title() == "SynthOrg console"

    term = page.locator("#events .obs pre.term")
    shown = await term.text_content()
    assert shown is not None
    for gone in ("\x1b", "\x9b", "\x9d", "\x07", "PWNED", "ZXZpbC", "C1-TITLE", "dcs-payload"):
        assert gone not in shown
    assert "javascript" not in shown
    assert "red plain bold green" in shown and "hyperlink" in shown and "C1-CSI" in shown
    assert await term.locator("span.fg1").first.text_content() == "red"
    assert await term.locator("span.fg2.b").text_content() == "bold green"
    await page.context.close()
