"""Browser tests of the web console: the real stack (as in tests/server) served on loopback,
driven by Playwright with Debian's Chromium (never a downloaded browser)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from synthorg.server import KeyStore, ServerSettings
from synthorg.service.runs import LocalRunService
from synthorg.store import Store
from tests.server.conftest import (  # the server suite's real-stack fixtures
    Keys,
    _hermetic_git,
    _scripts_importable,
    components,
    home,
    key_store,
    keys,
    repo,
    server_app,
    service,
    serving,
    settings,
    store,
)

__all__ = [
    "Keys",
    "_hermetic_git",
    "_scripts_importable",
    "components",
    "home",
    "key_store",
    "keys",
    "repo",
    "service",
    "settings",
    "store",
]

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
async def console_app(
    settings: ServerSettings, store: Store, service: LocalRunService, key_store: KeyStore
) -> FastAPI:
    """The agent server app (with its console)."""
    return server_app(settings, store, service, key_store)


@pytest.fixture
async def url(console_app: FastAPI) -> AsyncIterator[str]:
    """The server on loopback; its base URL."""
    async with serving(console_app) as base:
        yield base


@pytest.fixture
async def chrome() -> AsyncIterator[object]:
    """Debian's Chromium under Playwright (bootstrap --tests installs it)."""
    if shutil.which(str(CHROMIUM)) is None:
        pytest.fail("Chromium is missing: run scripts/bootstrap.sh --tests")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        instance = await pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            yield instance
        finally:
            await instance.close()
