"""Terminal output as the console shows it: a stray escape introducer hides nothing after it
(a real run); cursor movement is applied, and what it overwrote is flagged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.domain import ActionEvent, ObservationEvent
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.service.boot import Components
from synthorg.store import Store

from .conftest import Keys
from .helpers import new_page, sign_in, start_scripted

pytestmark = pytest.mark.browser


async def test_an_unterminated_osc_hides_nothing_after_it(
    url: str, keys: Keys, repo: Path, components: Components, chrome: Any
) -> None:
    command = "printf 'all tests passed\\n\\033]0;'; echo 'FAILED: 3 tests'; exit 3"
    turns = [ScriptedTurn.call("terminal", command=command)]
    conversation_id = await start_scripted(url, keys.operator, repo, components, turns)
    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.goto(f"{url}/#/c/{conversation_id}")
    term = page.locator("#events .obs pre.term").first
    await term.wait_for()
    shown = await term.text_content()
    assert shown is not None
    assert "all tests passed" in shown
    assert "FAILED: 3 tests" in shown, shown
    assert "[exit code: 3]" in shown, shown
    assert "\x1b" not in shown
    await page.context.close()


ECHO = (
    "python -m pytest -q tests/ \r\n"
    + "\x1b[A"
    + "\x1b[C" * 27
    + "&& echo done\r\n"
    + "1 passed\r\n[exit code: 0]"
)
OVERWRITE = "3 tests FAILED\r\x1b[2Kall tests passed\n[exit code: 1]"


async def test_cursor_movement_is_applied_and_overwrites_are_flagged(
    url: str, keys: Keys, repo: Path, store: Store, chrome: Any
) -> None:
    """The OpenHands terminal's echo (cursor up, then forward over what is there) reads as the
    command once; text a later write erased is flagged, with the raw output one click away."""
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {keys.operator}"}
    ) as client:
        created = await client.post(
            "/api/conversations", json={"repository": str(repo), "prompt": "x", "start": False}
        )
    cid = created.json()["id"]
    for n, content in enumerate((ECHO, OVERWRITE)):
        await store.append(
            cid, ActionEvent(action_id=f"act-{n}", tool_name="terminal", arguments={"command": "x"})
        )
        await store.append(cid, ObservationEvent(action_id=f"act-{n}", content=content))
    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.goto(f"{url}/#/c/{cid}")
    terms = page.locator("#events .obs pre.term")
    await terms.nth(1).wait_for()
    echo = await terms.nth(0).text_content()
    assert echo == "python -m pytest -q tests/ && echo done\n1 passed\n[exit code: 0]", echo
    obs = page.locator("#events .obs")
    assert await obs.nth(0).locator(".raw-output").count() == 0  # nothing was overwritten
    assert await terms.nth(1).text_content() == "all tests passed\n[exit code: 1]"
    raw = obs.nth(1).locator(".raw-output")
    await raw.locator("summary").click()
    assert "3 tests FAILED" in (await raw.locator("pre").text_content() or "")
    await page.context.close()
