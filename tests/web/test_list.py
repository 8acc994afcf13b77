"""The conversation list in the browser: task search in the server's store (beyond the loaded
page, among 10,000 conversations) and live updates pushed by the server, not polled."""

from __future__ import annotations

from typing import Any

import pytest

from synthorg.domain import ConversationStatus, StatusChangeEvent
from synthorg.store import Store
from tests.server.helpers import seed_conversations

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser

QUIET_WINDOW_MS = 4_500
"""An observation window, not a synchronisation: more than twice the old 2 s poll period,
during which a pushed list must not ask the server anything."""


def _list_requests(page: Any) -> list[str]:
    """The page's requests for the conversation list or its count, recorded from now on."""
    seen: list[str] = []
    page.on(
        "request",
        lambda r: (
            seen.append(r.url) if "/api/conversations?" in r.url or "/count" in r.url else None
        ),
    )
    return seen


async def test_search_finds_a_conversation_far_past_the_first_page(
    url: str, keys: Keys, store: Store, chrome: Any
) -> None:
    prompts = ["Port the LEGACY billing needle to Rust"] + [f"chore {i}" for i in range(9_999)]
    ids = await seed_conversations(store, prompts)
    oldest = ids[0]  # the last of 200 pages, newest first
    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.wait_for_selector("#conversation-count:has-text('10000 total')")
    assert await page.locator(f"tr[data-id='{oldest}']").count() == 0
    await page.fill("#task-search", "billing NEEDLE")
    await page.wait_for_selector(f"tr[data-id='{oldest}']")
    await page.wait_for_selector("#conversation-count:has-text('1 total')")
    assert await page.locator("#conversation-rows tr").count() == 1
    await page.context.close()


async def test_a_status_change_is_pushed_without_polling(
    url: str, keys: Keys, store: Store, chrome: Any
) -> None:
    (cid,) = await seed_conversations(store, ["watch my status"])
    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.wait_for_selector(f"tr[data-id='{cid}'] .status:has-text('created')")
    await page.wait_for_selector("#list-live.live")
    requests = _list_requests(page)
    await page.wait_for_timeout(QUIET_WINDOW_MS)
    assert requests == [], "the list asked the server without being told of a change"

    record = await store.get_conversation(cid)
    changed = record.model_copy(update={"status": ConversationStatus.CANCELLED})
    await store.transition(
        changed,
        StatusChangeEvent(old=record.status, new=ConversationStatus.CANCELLED, reason="test"),
    )
    await page.wait_for_selector(f"tr[data-id='{cid}'] .status:has-text('cancelled')")
    # One read of the page and its count per pushed change (two if a second push coalesced).
    assert 2 <= len(requests) <= 4, requests
    await page.context.close()
