# ruff: noqa: F811 (the fixtures of tests/server, imported to be shared, are parameters here)
"""Forge fixtures: the real stack and app (tests/server's), served on loopback with a forge
hub for project ``web`` whose repository is a real git repository; deliveries signed here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.forge.config import ForgeProject, ForgeSettings
from synthorg.forge.hub import ForgeHub, project_sites, project_stages
from synthorg.forge.signature import sign
from synthorg.mcp.config import McpConfig
from synthorg.server import KeyStore, ServerSettings, create_app
from synthorg.service.boot import Components
from synthorg.store import Store
from synthorg.store.protocol import DeliveryRecord, DeliveryState
from tests.server.conftest import (  # noqa: F401 (fixtures)
    _hermetic_git,
    _scripts_importable,
    home,
    key_store,
    repo,
    serving,
    settings,
)
from tests.server.real_stack import real_stack, stack_settings

DELIVERIES = Path(__file__).parent / "deliveries"
SECRET_ENV = "WEB_WEBHOOK_SECRET"
_PRICE = {"input_per_mtok_usd": "1000", "output_per_mtok_usd": "1000"}
PRICES = {"progress3": _PRICE, "answer_each": _PRICE}


def example(name: str) -> dict[str, Any]:
    """A vendored example delivery (``issues.labeled`` ...)."""
    data: dict[str, Any] = json.loads((DELIVERIES / f"{name}.json").read_text())
    return data


@dataclass
class Forge:
    """The served app and what a test needs to talk to it."""

    url: str
    secret: str
    store: Store
    components: Components

    async def deliver(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        delivery: str | None = None,
        project: str = "web",
        secret: str | None = None,
        signature: str | None = None,
    ) -> httpx.Response:
        """POST a delivery as GitHub does (signed with the project's secret unless told)."""
        body = json.dumps(payload).encode()
        headers = {
            "content-type": "application/json",
            "x-github-event": event,
            "x-github-delivery": delivery or secrets.token_hex(8),
            "user-agent": "GitHub-Hookshot/test",
        }
        if signature is None:
            signature = sign(body, secret or self.secret)
        if signature:
            headers["x-hub-signature-256"] = signature
        async with httpx.AsyncClient(base_url=self.url, timeout=60) as client:  # load 30: 10 s+
            return await client.post(f"/api/forge/{project}/webhook", content=body, headers=headers)

    async def settled(self, delivery: str, deadline_s: float = 60.0) -> DeliveryRecord:
        """The delivery once the processor settled it (bounded wait on the store)."""
        return await until(
            lambda: self._find(delivery),
            lambda d: d is not None and d.state is not DeliveryState.QUEUED,
            deadline_s,
        )

    async def _find(self, delivery: str) -> DeliveryRecord | None:
        for record in await self.store.recent_deliveries(1000):
            if record.delivery_id == delivery:
                return record
        return None


async def until[T](probe: Callable[[], Any], done: Callable[[Any], bool], deadline_s: float) -> Any:
    """Ask ``probe`` until ``done`` holds, within ``deadline_s`` (then fail)."""
    async with asyncio.timeout(deadline_s):
        while True:
            value = await probe()
            if done(value):
                return value
            await asyncio.sleep(0.05)


def web_project(repo: Path, **overrides: Any) -> ForgeProject:
    """Project ``web``: the example's label ``bug`` starts a run on the test repository."""
    fields: dict[str, Any] = {
        "webhook_secret_env": SECRET_ENV,
        "repository": str(repo),
        "label": "bug",
        "budget_usd": Decimal("5"),
    }
    return ForgeProject.model_validate(fields | overrides)


@pytest.fixture
def project_overrides() -> dict[str, Any]:
    """Per-test changes to project ``web``."""
    return {}


@contextlib.asynccontextmanager
async def forge_app(
    home: Path,
    settings: ServerSettings,
    key_store: KeyStore,
    project: ForgeProject,
    secret: str,
    *,
    mcp: McpConfig | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Forge]:
    """The real stack and app with a forge hub, on loopback; with ``mcp`` (its projects'
    forge and remote, tokens in ``env``) the hub publishes landed runs."""
    stack = stack_settings(home)
    sections = dict(stack.sections)
    [provider] = sections["gateway"]["providers"]
    provider = provider | {
        "models": [*provider["models"], "answer_each"],
        "scripts": provider["scripts"] | {"answer_each": "tests.forge.forge_scripts:answer_each"},
    }
    sections["gateway"] = sections["gateway"] | {"prices": PRICES, "providers": [provider]}
    stack = stack.model_copy(update={"sections": sections})
    forge_settings = ForgeSettings(projects={"web": project}, console_url="https://console.test")
    stages = project_stages(forge_settings, mcp, env or {}) if mcp is not None else None
    sites = project_sites(forge_settings, mcp) if mcp is not None else None
    async with real_stack(stack, repositories=settings.repository_policy(stack)) as wired:
        hub = ForgeHub.build(
            forge_settings,
            {SECRET_ENV: secret},
            wired.store,
            wired.service,
            stages=stages,
            sites=sites,
            poll_s=0.2,
        )
        app = create_app(
            settings, store=wired.store, run_service=wired.service, auth=key_store, forge=hub
        )
        async with serving(app) as url:
            yield Forge(url=url, secret=secret, store=wired.store, components=wired)


@pytest.fixture
async def forge(
    home: Path,
    settings: ServerSettings,
    key_store: KeyStore,
    repo: Path,
    project_overrides: dict[str, Any],
    _scripts_importable: None,
) -> AsyncIterator[Forge]:
    """The served app with project ``web``."""
    async with forge_app(
        home, settings, key_store, web_project(repo, **project_overrides), "s3cret-" + "x" * 20
    ) as served:
        yield served


async def messages_of(forge: Forge, conversation: str) -> list[str]:
    """The user messages in a conversation's log."""
    from synthorg.domain.events import MessageEvent

    events = await forge.store.history(conversation, limit=1000)
    return [
        e.event.text for e in events if isinstance(e.event, MessageEvent) and e.event.role == "user"
    ]


def on_pull(name: str, conversation: str, number: int = 2) -> dict[str, Any]:
    """An example feedback delivery moved onto the run's own pull request: its head branch is
    ``synthorg/<conversation>`` (the only fields changed)."""
    data = example(name)
    branch = f"synthorg/{conversation}"
    if name.startswith("check_run"):
        pull = data["check_run"]["pull_requests"][0]
        pull["head"]["ref"], pull["number"] = branch, number
    else:
        data["pull_request"]["head"]["ref"], data["pull_request"]["number"] = branch, number
    return data
