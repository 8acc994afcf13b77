"""The console's forge links come from what the control plane recorded, and a URL is shown
as a link only when it is the forge's page of that very issue or pull request, over https on
the project's configured forge host."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from synthorg.forge.links import ForgeLinks, ForgeSite
from synthorg.mcp.config import ForgeConfig
from synthorg.store import Store, open_store
from synthorg.store.protocol import DeliveryRecord, DeliveryState

SITE = ForgeSite.of(ForgeConfig(owner="acme", repo="web"))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(str(tmp_path / "store.db"))
    try:
        yield opened
    finally:
        await opened.close()


def _delivery(
    delivery_id: str, event: str, payload: dict[str, Any], *, state: str = "started"
) -> DeliveryRecord:
    at = datetime.now(UTC)
    return DeliveryRecord(
        delivery_id=delivery_id,
        project_id="web",
        event=event,
        state=DeliveryState(state),
        issue=payload.get("issue", {}).get("number"),
        conversation_id="c-1",
        payload=payload,
        received_at=at,
        updated_at=at,
    )


def test_the_forge_host_is_derived_from_the_api_or_configured() -> None:
    assert SITE is not None and SITE.base == "https://github.com"
    ghe = ForgeSite.of(
        ForgeConfig(api_base_url="https://ghe.acme.test/api/v3", owner="a", repo="b")
    )
    assert ghe is not None and ghe.base == "https://ghe.acme.test"
    assert (
        ForgeSite.of(ForgeConfig(api_base_url="http://127.0.0.1:9/api/v3", owner="a", repo="b"))
        is None
    )
    web = ForgeConfig(
        api_base_url="http://127.0.0.1:9/api/v3",
        web_base_url="https://github.test",
        owner="a",
        repo="b",
    )
    assert (site := ForgeSite.of(web)) is not None and site.base == "https://github.test"
    odd = ForgeConfig(api_base_url="https://ghe.test:port/api", owner="a", repo="b")
    assert ForgeSite.of(odd) is None  # a port that is none links nothing (and does not crash)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://github.com/acme/web/issues/7", True),
        ("https://GitHub.com/acme/web/issues/7", True),
        ("http://github.com/acme/web/issues/7", False),
        ("javascript:alert(1)//github.com/acme/web/issues/7", False),
        ("https://github.com.evil.test/acme/web/issues/7", False),
        ("https://evil@github.com/acme/web/issues/7", False),
        ("https://github.com:8443/acme/web/issues/7", False),
        ("https://github.com/acme/web/issues/8", False),
        ("https://github.com/acme/other/issues/7", False),
        ("https://github.com/acme/web/issues/7?x=1", False),
        ("https://github.com/acme/web/issues/7#frag", False),
        ("https://github.com/acme/web/issues/7/../../../evil", False),
        (" https://github.com/acme/web/issues/7", False),
        (7, False),
    ],
)
def test_only_the_forges_page_of_that_issue_is_a_link(url: object, shown: bool) -> None:
    assert SITE is not None
    assert (SITE.link(url, "issues", 7) is not None) is shown


async def test_a_conversation_shows_its_issue_pull_and_triggers(store: Store) -> None:
    title = '<img src=x onerror="alert(1)">'
    issue = {"number": 7, "title": title, "html_url": "https://github.com/acme/web/issues/7"}
    await store.record_delivery(_delivery("d-1", "issues.labeled", {"issue": issue}))
    await store.record_delivery(
        _delivery("d-2", "check_run.completed", {"check_run": {}}, state="started")
    )
    await store.record_delivery(
        _delivery("d-3", "pull_request_review.submitted", {}, state="refused")
    )
    await store.record_pull("c-1", "web", 12, "https://github.com/acme/web/pull/12")
    links = ForgeLinks(store, {"web": SITE} if SITE else {})
    shown = await links.of("c-1")
    assert shown is not None
    assert shown.project_id == "web" and shown.triggers == ["ci", "label"]
    assert shown.issue is not None and shown.issue.title == title  # data; the page escapes it
    assert shown.issue.url == "https://github.com/acme/web/issues/7"
    assert shown.pull is not None and shown.pull.number == 12
    assert shown.pull.url == "https://github.com/acme/web/pull/12"
    # A project with no configured forge host shows numbers and titles, no link.
    bare = await ForgeLinks(store, {}).of("c-1")
    assert bare is not None and bare.issue is not None and bare.issue.url is None
    assert bare.pull is not None and bare.pull.url is None
    assert await links.of("nobody") is None
