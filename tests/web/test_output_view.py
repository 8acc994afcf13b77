"""Terminal output as the console shows it, from real runs: a stray escape introducer hides
nothing after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from synthorg.gateway.scripted import ScriptedTurn
from synthorg.service.boot import Components

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
