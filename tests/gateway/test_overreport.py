"""An upstream that reports more usage than a request was admitted for (issue 30, finding 1).

The rule: the ledger records what the upstream reported (what the provider will charge) and
the admitted bound (in the kill's reason); the first response over its reservation kills its
run and closes its delegation tree at once, is logged as ``upstream_overreport`` and counted
per provider in /metrics. Through a real gateway over loopback HTTP, both stores.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.domain.binding import RunBinding
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.wire import ChatRequest
from synthorg.store import StoreConfig, open_store
from synthorg.store.protocol import ExecutionStatus

from .fake_upstream import FakeUpstream, Reply
from .harness import FAKE_MODEL, FAKE_PRICE, FakeHarness, fake_config, tree_conversation

REFUSED = (402, 403)
METRIC = 'synthorg_gateway_upstream_overreport_total{provider="fake"}'


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def gw(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FakeHarness]:
    """The gateway (real HTTP) on a SQLite or PostgreSQL ledger, in front of a FakeUpstream."""
    if request.param == "sqlite":
        url = str(tmp_path / "store.db")
    else:
        url = request.getfixturevalue("pg_schema")
    store = await open_store(StoreConfig(url=url))
    try:
        upstream = FakeUpstream()
        async with serve_embedded(upstream, tcp_port=0) as up:
            assert up.tcp_base_url
            config = fake_config(tmp_path, up.tcp_base_url)
            app = create_gateway_app(config, signer_for(config), store)
            try:
                async with serve_embedded(app, tcp_port=0) as served:
                    assert served.tcp_base_url
                    yield FakeHarness(app, app.gateway, upstream, served.tcp_base_url, store)
            finally:
                await app.gateway.aclose()
    finally:
        await store.close()


def _body(stream: bool, nonce: str = "") -> dict[str, Any]:
    return {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"hi {nonce}"}],
        "max_tokens": 16,
        "stream": stream,
    }


async def _send(gw: FakeHarness, token: str, stream: bool, nonce: str = "") -> int:
    async with gw.http(token) as http:
        if not stream:
            return (await http.post("/chat/completions", json=_body(stream, nonce))).status_code
        async with http.stream("POST", "/chat/completions", json=_body(stream, nonce)) as answer:
            await answer.aread()
            return answer.status_code


def _reserved(gw: FakeHarness, body: dict[str, Any]) -> Decimal:
    request = ChatRequest.model_validate(body)
    return gw.gateway.bounds(gw.gateway.forwarded(request, FAKE_MODEL)).worst


async def _metric(gw: FakeHarness) -> float:
    root = httpx.URL(gw.base_url).join("/")
    async with httpx.AsyncClient(base_url=root) as http:
        answer = await http.get("/metrics")
    assert answer.status_code == 200
    text = answer.text
    lines = [line for line in text.splitlines() if line.startswith(METRIC)]
    return float(lines[0].split()[-1]) if lines else 0.0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("ceiling", "over"),
    [(Decimal(100), 1_000), (Decimal("0.5"), 1_001_000)],
    ids=["within-ceiling", "issue-figures"],
)
async def test_an_overreport_is_billed_as_reported_and_kills_the_run(
    gw: FakeHarness, stream: bool, ceiling: Decimal, over: int
) -> None:
    """Before: billed as reported and the run went on (within the ceiling: 200 again)."""
    gw.upstream.plan = lambda body: Reply(text="ok", over_report=over)
    binding, token = await gw.run(ceiling)
    assert await _send(gw, token, stream) == 200  # answered: the upstream already billed it
    assert await _send(gw, token, stream) in REFUSED, "no further admission"
    assert len(gw.upstream.records) == 1
    await gw.gateway.flush(binding.execution_id)
    row = await gw.store.get_execution(binding.execution_id)
    reported = gw.upstream.records[0].reported
    assert reported is not None
    assert row.cost_usd == FAKE_PRICE.cost(*reported), "the ledger has what the provider charges"
    assert row.status == ExecutionStatus.KILLED
    assert "upstream_overreport" in row.status_reason
    bound = _reserved(gw, _body(stream))
    assert f"${bound:.6f}" in row.status_reason, "and the bound it was admitted for"
    assert await _metric(gw) == 1.0
    assert await gw.store.overreporting_providers() == {"fake": 1}, "flagged for doctor"


@pytest.mark.parametrize("stream", [False, True])
async def test_concurrent_overreports_stop_all_admission(gw: FakeHarness, stream: bool) -> None:
    """32 racing requests each reporting ~8x their reservation: the run is dead after them.

    Before: the run stayed active (spend $33 of $100) and the second wave was answered."""
    gw.upstream.plan = lambda body: Reply(text="ok", over_report=1_000)
    binding, token = await gw.run(Decimal(100))
    first = await asyncio.gather(*(_send(gw, token, stream, f"a{i}") for i in range(32)))
    assert set(first) <= {200, *REFUSED}
    second = await asyncio.gather(*(_send(gw, token, stream, f"b{i}") for i in range(8)))
    assert set(second) <= set(REFUSED), second
    assert len(gw.upstream.records) == first.count(200)
    await gw.gateway.flush(binding.execution_id)
    row = await gw.store.get_execution(binding.execution_id)
    assert row.status == ExecutionStatus.KILLED
    bills = (FAKE_PRICE.cost(*r.reported) for r in gw.upstream.records if r.reported)
    reported = sum(bills, Decimal(0))
    assert row.cost_usd == reported
    assert await _metric(gw) == first.count(200)


async def test_an_overreport_closes_the_delegation_tree(gw: FakeHarness) -> None:
    """A child's over-report: the root (same tree) is refused too. Before: the root went on."""
    root = tree_conversation(Decimal(100))
    child = tree_conversation(Decimal(50), root.id)
    for record in (root, child):
        await gw.store.create_conversation(record)
    tokens = {}
    for record in (root, child):
        binding = RunBinding(
            execution_id=f"exec-{secrets.token_hex(4)}",
            agent_id="agent-1",
            task_id=record.task.id,
            project_id="proj",
            conversation_id=record.id,
            provider="fake",
            model_id=FAKE_MODEL,
            cost_ceiling=record.budget_usd,
        )
        tokens[record.id] = await gw.gateway.issue(binding)
    assert await _send(gw, tokens[root.id], False) == 200  # both in the tree's state
    gw.upstream.plan = lambda body: Reply(text="ok", over_report=1_000)
    assert await _send(gw, tokens[child.id], False) == 200
    gw.upstream.plan = lambda body: Reply(text="ok")
    assert await _send(gw, tokens[root.id], False) in REFUSED
    assert len(gw.upstream.records) == 2
