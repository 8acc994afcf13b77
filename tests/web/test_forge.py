"""A forge-driven conversation in the console: its issue and pull request are links only when
the server checked them against the project's forge (an issue title is the forge's untrusted
text and stays text), and the list filters by project and by trigger."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.forge.config import ForgeProject, ForgeSettings
from synthorg.forge.hub import ForgeHub
from synthorg.forge.links import ForgeSite
from synthorg.mcp.config import ForgeConfig
from synthorg.server import KeyStore, ServerSettings, create_app
from synthorg.service.runs import LocalRunService
from synthorg.store import Store
from synthorg.store.protocol import DeliveryRecord, DeliveryState

from .conftest import Keys, serving
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser

HOSTILE = "<img src=x onerror=\"window.__pwned='title'\"> <script>window.__pwned='s'</script>"
SITE = ForgeSite.of(ForgeConfig(owner="acme", repo="web"))


@pytest.fixture
async def forge_url(
    settings: ServerSettings,
    store: Store,
    service: LocalRunService,
    key_store: KeyStore,
    repo: Path,
) -> AsyncIterator[str]:
    """The console of a server whose project ``web`` takes forge webhooks (github.com)."""
    project = ForgeProject(webhook_secret_env="WEB_SECRET", repository=str(repo))
    forge = ForgeSettings(projects={"web": project, "docs": project})
    assert SITE is not None
    hub = ForgeHub.build(
        forge, {"WEB_SECRET": "s" * 32}, store, service, sites={"web": SITE, "docs": SITE}
    )
    app = create_app(settings, store=store, run_service=service, auth=key_store, forge=hub)
    async with serving(app) as base:
        yield base


async def _conversation(client: httpx.AsyncClient, repo: Path, project: str, prompt: str) -> str:
    created = await client.post(
        "/api/conversations",
        json={"repository": str(repo), "project_id": project, "prompt": prompt, "start": False},
    )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def _drove(
    store: Store, conversation: str, project: str, event: str, issue: dict[str, Any]
) -> None:
    """What the processor records of a delivery that started a run (tests/forge drive it)."""
    at = datetime.now(UTC)
    await store.record_delivery(
        DeliveryRecord(
            delivery_id=f"d-{conversation}-{event}",
            project_id=project,
            event=event,
            state=DeliveryState.STARTED,
            outcome="run started",
            issue=issue["number"],
            conversation_id=conversation,
            payload={"issue": issue},
            received_at=at,
            updated_at=at,
        )
    )


async def test_issue_and_pull_links_and_the_project_and_trigger_filters(
    forge_url: str, keys: Keys, repo: Path, store: Store, chrome: Any
) -> None:
    headers = {"Authorization": f"Bearer {keys.operator}"}
    # Worktree creation can take seconds on a busy machine: more than httpx's 5 s default.
    async with httpx.AsyncClient(base_url=forge_url, headers=headers, timeout=120) as client:
        labelled = await _conversation(client, repo, "web", "labelled run")
        commented = await _conversation(client, repo, "web", "commented run")
        forged = await _conversation(client, repo, "docs", "docs run")
        await _conversation(client, repo, "web", "manual run")
    issue = {"number": 7, "title": HOSTILE, "html_url": "https://github.com/acme/web/issues/7"}
    await _drove(store, labelled, "web", "issues.labeled", issue)
    await store.record_pull(labelled, "web", 12, "https://github.com/acme/web/pull/12")
    # An issue URL that is not the forge's page of that issue is shown as text.
    elsewhere = {"number": 8, "title": "x", "html_url": "https://github.com.evil.test/a/b/issues/8"}
    await _drove(store, commented, "web", "issue_comment.created", elsewhere)
    await store.record_pull(commented, "web", 13, "javascript:window.__pwned='pull'")
    await _drove(store, forged, "docs", "issues.labeled", {"number": 1, "title": "docs"})

    page = await new_page(chrome, forge_url)
    await sign_in(page, keys.viewer)
    await page.wait_for_selector("#conversation-count:has-text('4 total')")

    await page.select_option("#trigger-filter", "label")
    await page.wait_for_selector("#conversation-count:has-text('2 total')")
    await page.fill("#project-filter", "web")
    await page.wait_for_selector("#conversation-count:has-text('1 total')")
    assert await page.locator("td.task a").all_text_contents() == ["labelled run"]
    await page.select_option("#trigger-filter", "comment")
    await page.wait_for_selector("#conversation-count:has-text('1 total')")
    await page.wait_for_function(
        "() => [...document.querySelectorAll('td.task a')].map(a => a.textContent).join() === "
        "'commented run'"
    )
    await page.select_option("#trigger-filter", "")
    await page.wait_for_selector("#conversation-count:has-text('3 total')")

    await page.goto(f"{forge_url}/#/c/{labelled}")
    await page.wait_for_selector("#forge-pull")
    issue_link = page.locator("a#forge-issue")
    assert await issue_link.get_attribute("href") == "https://github.com/acme/web/issues/7"
    assert await issue_link.text_content() == f"issue #7 {HOSTILE}"  # the title, as text
    assert await page.locator("#conv-forge img, #conv-forge script").count() == 0
    assert await page.locator("a#forge-pull").get_attribute("href") == (
        "https://github.com/acme/web/pull/12"
    )
    assert "triggers label" in (await page.inner_text("#conv-forge"))

    await page.goto(f"{forge_url}/#/c/{commented}")
    await page.wait_for_selector("#forge-pull")
    assert await page.locator("span#forge-issue").text_content() == "issue #8 x"
    assert await page.locator("span#forge-pull").text_content() == "pull request #13"
    assert await page.locator("#conv-forge a").count() == 0
    assert await page.evaluate("() => window.__pwned") is None
    await page.context.close()
