"""Conversations in the browser: the live list, a run started from the form and watched to
its end, no gap and no duplicate in the rendered events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Keys
from .helpers import api_last_seq, new_page, rendered_seqs, sign_in

pytestmark = pytest.mark.browser


async def test_start_a_run_from_the_form_and_watch_it_finish(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    page = await new_page(chrome, url)
    await sign_in(page, keys.operator)
    await page.wait_for_function(
        "() => document.querySelector('#nr-repository').value !== ''"
    )  # offered from [server] repository_roots
    assert await page.input_value("#nr-repository") == str(repo)
    await page.click("#new-run-toggle")  # the form is folded away by default
    await page.fill("#nr-task", "append progress lines")
    await page.click("#new-run button[type=submit]")
    await page.wait_for_url("**/#/c/*")
    conversation_id = page.url.rsplit("/", 1)[1]
    await page.wait_for_selector("#conn.live")
    await page.wait_for_selector(".ev.msg.finished")
    await page.wait_for_selector("#conv-meta:has-text('finished')")
    # Actions carry their observations; the log has no gap and no duplicate.
    assert await page.locator(".ev.action .obs").count() >= 3
    last = await api_last_seq(url, keys.operator, conversation_id)
    await page.wait_for_function(
        f"() => document.querySelectorAll('#events [data-seq]').length >= {last}"
    )
    assert sorted(await rendered_seqs(page)) == list(range(1, last + 1))
    await page.context.close()


async def test_the_list_updates_live_and_filters(
    url: str, keys: Keys, repo: Path, chrome: Any
) -> None:
    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.wait_for_selector("#conversation-count:has-text('0 total')")
    assert await page.locator("#new-run").count() == 0  # a viewer gets no form
    headers = {"Authorization": f"Bearer {keys.operator}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        for prompt in ("first <b>task</b>", "second task"):
            created = await client.post(
                "/api/conversations",
                json={"repository": str(repo), "prompt": prompt, "start": False},
            )
            assert created.status_code == 201
    # No reload: the list picks them up by itself.
    await page.wait_for_selector("#conversation-count:has-text('2 total')")
    await page.wait_for_function(
        "() => [...document.querySelectorAll('td.task a')]"
        ".some(a => a.textContent === 'first <b>task</b>')"
    )
    assert await page.locator("td.task b").count() == 0  # the markup is text, not an element
    await page.fill("#task-search", "second")
    await page.wait_for_function(
        "() => document.querySelectorAll('#conversation-rows tr').length === 1"
    )
    await page.fill("#task-search", "")
    await page.select_option("#status-filter", "finished")
    await page.wait_for_selector("#conversation-count:has-text('0 total')")
    await page.context.close()


async def test_a_long_log_keeps_a_window_of_rows_and_shows_earlier_ones_on_request(
    url: str, keys: Keys, repo: Path, store: Any, chrome: Any
) -> None:
    from synthorg.domain import MessageEvent

    headers = {"Authorization": f"Bearer {keys.operator}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        created = await client.post(
            "/api/conversations", json={"repository": str(repo), "prompt": "long", "start": False}
        )
    cid = created.json()["id"]
    for i in range(1300):
        await store.append(cid, MessageEvent(role="assistant", text=f"line {i}"))
    last = await api_last_seq(url, keys.operator, cid)
    page = await new_page(chrome, url)
    await sign_in(page, keys.viewer)
    await page.goto(f"{url}/#/c/{cid}")
    await page.wait_for_selector(f"#events [data-seq='{last}']")
    seqs = await rendered_seqs(page)
    assert seqs == list(range(last - 299, last + 1))  # the newest 300, in order, once each
    await page.click("#show-earlier")
    await page.wait_for_function(
        "() => document.querySelectorAll('#events [data-seq]').length > 300"
    )
    seqs = await rendered_seqs(page)
    assert seqs == list(range(last - 499, last + 1))
    # Live events still arrive, after a page of earlier ones was added.
    await store.append(cid, MessageEvent(role="assistant", text="the newest line"))
    await page.wait_for_selector(f"#events [data-seq='{last + 1}']")
    # The log opened at its newest 1,000 events; the older ones load by REST on request,
    # until the whole log is on the page: in order, without a gap or a repeat.
    for _ in range(30):
        if not await page.is_visible("#show-earlier"):
            break
        before = len(await rendered_seqs(page))
        await page.click("#show-earlier")
        await page.wait_for_function(
            f"() => document.querySelectorAll('#events [data-seq]').length > {before}"
        )
    assert await rendered_seqs(page) == list(range(1, last + 2))
    await page.context.close()
