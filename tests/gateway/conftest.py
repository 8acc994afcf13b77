"""Fixtures: scripted upstream over real HTTP, the gateway in front of it, a real SQLite ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.providers.base import Provider
from synthorg.gateway.providers.openai_compat import OpenAICompatProvider
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted_server import ScriptedUpstream
from synthorg.store import open_store
from synthorg.store.protocol import Store

from .fake_upstream import FakeUpstream
from .harness import (
    LOCAL_MODEL,
    UPSTREAM_MODEL,
    FakeHarness,
    Harness,
    fake_config,
    make_config,
    tool_script,
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await open_store(tmp_path / "store.db")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def harness(tmp_path: Path, store: Store) -> AsyncIterator[Harness]:
    upstream_scripts = ScriptedProvider({UPSTREAM_MODEL: tool_script()})
    upstream = ScriptedUpstream(upstream_scripts)
    async with serve_embedded(upstream, tcp_port=0) as up:
        assert up.tcp_base_url
        config = make_config(tmp_path, up.tcp_base_url)
        local = ScriptedProvider({LOCAL_MODEL: tool_script()})
        providers: dict[str, Provider] = {
            "upstream": OpenAICompatProvider("upstream", up.tcp_base_url),
            "scripted": local,
        }
        app = create_gateway_app(config, signer_for(config), store, providers)
        async with serve_embedded(app, tcp_port=0) as gw:
            assert gw.tcp_base_url
            yield Harness(
                app, app.gateway, upstream, upstream_scripts, local, gw.tcp_base_url, store
            )
        await app.gateway.aclose()


@pytest.fixture
async def fake(
    request: pytest.FixtureRequest, tmp_path: Path, store: Store
) -> AsyncIterator[FakeHarness]:
    """The gateway in front of a FakeUpstream. Its upstream idle timeout is 1 s, or what the
    test gives: ``@pytest.mark.parametrize("fake", [120.0], indirect=True)``."""
    upstream = FakeUpstream()
    async with serve_embedded(upstream, tcp_port=0) as up:
        assert up.tcp_base_url
        config = fake_config(tmp_path, up.tcp_base_url, getattr(request, "param", 1.0))
        app = create_gateway_app(config, signer_for(config), store)
        async with serve_embedded(app, tcp_port=0) as gw:
            assert gw.tcp_base_url
            yield FakeHarness(app, app.gateway, upstream, gw.tcp_base_url, store)
