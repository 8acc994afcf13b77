"""Usage is live: while a run is held at its confirmations, the record (API), the list and the
page already show its turns and its spend against the budget, moving with each turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.gateway.scripted import ScriptedTurn
from synthorg.server import ServerSettings
from synthorg.service.boot import Components
from synthorg.settings import Settings
from tests.server.real_stack import real_stack, stack_settings

from .conftest import Keys
from .helpers import new_page, sign_in, start_scripted

pytestmark = pytest.mark.browser


@pytest.fixture
async def components(
    home: Path, settings: ServerSettings, _scripts_importable: None
) -> AsyncIterator[Components]:
    """The real stack with its model priced, so spend shows."""
    stack = stack_settings(home)
    gateway = {
        **stack.sections["gateway"],
        "prices": {"progress3": {"input_per_mtok_usd": 3000, "output_per_mtok_usd": 15000}},
    }
    priced = Settings(home=home, sections={**stack.sections, "gateway": gateway})
    async with real_stack(priced, repositories=settings.repository_policy(priced)) as wired:
        yield wired


async def test_turns_and_spend_move_during_the_run(
    url: str, keys: Keys, repo: Path, components: Components, chrome: Any
) -> None:
    turns = [ScriptedTurn.call("terminal", command=f"echo {n} >> progress.txt") for n in range(3)]
    conversation_id = await start_scripted(
        url, keys.operator, repo, components, turns, confirmation_policy="always", budget_usd="50"
    )
    page = await new_page(chrome, url)
    await sign_in(page, keys.approver)
    await page.goto(f"{url}/#/c/{conversation_id}")
    api = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {keys.viewer}"})
    spent = []
    async with api:
        for turn in (1, 2, 3):
            box = page.locator("[data-pending]").first
            await box.wait_for()
            # Held at this turn's confirmation: the run is live, its totals already moved.
            body = (await api.get(f"/api/conversations/{conversation_id}")).json()
            assert body["active"] and body["status"] == "waiting_confirmation", body
            assert body["turns"] == turn, body
            cost = Decimal(body["usage"]["cost_usd"])
            assert cost > (spent[-1] if spent else 0) and body["usage"]["tokens_in"] > 0, body
            spent.append(cost)
            listed = (await api.get("/api/conversations")).json()["items"]
            assert [(c["turns"], c["usage"]) for c in listed if c["id"] == conversation_id] == [
                (turn, body["usage"])
            ]
            await page.wait_for_selector(f"#conv-meta:has-text('{turn} turns')")
            shown = f"cost ${cost:.2f} of $50.00 budget" if cost >= 1 else f"cost ${cost:.4f}"
            await page.wait_for_selector(f"#usage:has-text('{shown}')")
            assert await page.locator("#budget-meter").get_attribute("max") == "50"
            action_id = await box.get_attribute("data-pending")
            await box.locator("button.approve").click()
            await page.locator(f"[data-decision='{action_id}']").wait_for()
        await page.wait_for_selector("#conv-meta:has-text('finished')")
        # The close replaces the live figures with the ledger's, counting nothing twice.
        final = (await api.get(f"/api/conversations/{conversation_id}")).json()
    assert final["turns"] == 4, final  # three commands and the finish
    assert spent[-1] < Decimal(final["usage"]["cost_usd"]) < 2 * spent[-1], (final, spent)
    await page.context.close()
