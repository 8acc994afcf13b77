"""A bearer acts only at the ledger that opened its run (issue 29, finding 2).

A killed run's bearer, shown to a gateway with the same signing key but another store (a
fresh one, or this one wiped or restored from a backup while the key file survived), used to
be answered 200 with a fresh budget: the gateway opened the missing row from the claims.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from synthorg.errors import NotFoundError
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig, ProviderConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.service import Gateway
from synthorg.store import open_store
from synthorg.store.protocol import ExecutionStatus, Store
from tests.faults.conftest import PG_ADMIN

from .harness import open_run

MODEL = "echo-model"


def _config(tmp_path: Path) -> GatewayConfig:
    return GatewayConfig(
        providers=[ProviderConfig(name="s", kind="scripted", models=(MODEL,), script="echo")],
        signing_key_file=tmp_path / "keys" / "gateway.key",  # one key for every gateway here
    )


@asynccontextmanager
async def _gateway(
    config: GatewayConfig, store: Store
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    app = create_gateway_app(config, signer_for(config), store)
    try:
        async with (
            serve_embedded(app, tcp_port=0) as gw,
            httpx.AsyncClient(base_url=str(gw.tcp_base_url)) as http,
        ):
            yield app.gateway, http
    finally:
        await app.gateway.aclose()


async def _chat(http: httpx.AsyncClient, bearer: str) -> httpx.Response:
    return await http.post(
        "/chat/completions",
        headers={"authorization": f"Bearer {bearer}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hello"}]},
    )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two stores: the run's, and another (a fresh database, the same key)."""
    if request.param == "sqlite":
        yield str(tmp_path / "a.db"), str(tmp_path / "b.db")
        return
    schemas = [f"l_{secrets.token_hex(6)}" for _ in range(2)]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"CREATE SCHEMA {schema}")
    try:
        a, b = (f"{PG_ADMIN}?options=-csearch_path%3D{schema}" for schema in schemas)
        yield a, b
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _forget(url: str, execution_id: str) -> None:
    """Delete the row behind the store's back, as a restore from an older backup does."""
    if url.startswith("postgresql://"):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM executions WHERE execution_id = %s", (execution_id,))
        return
    with contextlib.closing(sqlite3.connect(url)) as conn, conn:
        conn.execute("DELETE FROM executions WHERE execution_id = ?", (execution_id,))


async def test_a_killed_runs_bearer_is_refused_by_a_gateway_over_another_store(
    tmp_path: Path, store_urls: tuple[str, str]
) -> None:
    config = _config(tmp_path)
    own_url, other_url = store_urls
    own, other = await open_store(own_url), await open_store(other_url)
    try:
        assert own.ledger_id != other.ledger_id
        async with _gateway(config, own) as (gateway, http):
            binding, bearer = await open_run(gateway, MODEL, "s", None)
            assert (await _chat(http, bearer)).status_code == 200
        await own.set_execution_status(binding.execution_id, ExecutionStatus.KILLED, "killed")
        async with _gateway(config, other) as (_, http):
            answers = [await _chat(http, bearer) for _ in range(5)]
        assert [a.status_code for a in answers] == [401] * 5, answers[0].text
        assert "issued by ledger" in answers[0].json()["error"]["message"]
        with pytest.raises(NotFoundError):  # nothing was opened from the claims
            await other.get_execution(binding.execution_id)
    finally:
        await own.close()
        await other.close()


async def test_a_bearer_whose_row_is_gone_is_refused_never_reopened(
    tmp_path: Path, store_urls: tuple[str, str]
) -> None:
    """Same ledger id, no row: a store restored from a backup taken before the run opened."""
    config = _config(tmp_path)
    store = await open_store(store_urls[0])
    try:
        async with _gateway(config, store) as (gateway, http):
            binding, bearer = await open_run(gateway, MODEL, "s", None)
            _forget(store_urls[0], binding.execution_id)
            answers = [await _chat(http, bearer) for _ in range(3)]
        assert [a.status_code for a in answers] == [403] * 3, answers[0].text
        assert answers[0].json()["error"]["code"] == "execution_unknown"
        with pytest.raises(NotFoundError):
            await store.get_execution(binding.execution_id)
    finally:
        await store.close()
