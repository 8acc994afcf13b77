"""What a delegation tree's shared budget costs the gateway per request.

Four executions (a root and three children, the shape delegation makes) send chat requests
concurrently through the gateway over loopback HTTP (scripted echo provider, real SQLite
ledger). Measured, alternated over rounds in one process: the executions belong to one tree
(their conversations in the store: the root's budget shared, looked up in the ledger on load
and every ``ledger_refresh_s``) vs the same four with no tree (their conversations unknown to
the store: each admitted against its own ceiling only, as every run was before). Budgets are
large, so neither goes serial: this is the bookkeeping's cost, not the tail's serialisation.

    uv run python benchmarks/tree_budget_bench.py [--requests N] [--rounds R] [--store URL]

``--store postgresql://...`` measures the shared ledger instead (there each admission also
holds its worst case in the ledger: issue 18's budgets across processes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import httpx

from synthorg.domain import ConversationRecord
from synthorg.domain.binding import RunBinding
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig, ModelPrice, ProviderConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.store import open_store
from synthorg.store.protocol import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test harness's record
from tests.gateway.harness import tree_conversation

MODEL = "bench-model"
BUDGET = Decimal(1_000_000)
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "ping " * 20}], "max_tokens": 64}


def _record(root_id: str | None) -> ConversationRecord:
    budget = BUDGET if root_id is None else BUDGET / 4
    return tree_conversation(budget, root_id, model=MODEL, provider="scripted")


async def _tokens(app_gateway: object, store: Store, tree: bool) -> list[str]:
    from synthorg.gateway.service import Gateway

    assert isinstance(app_gateway, Gateway)
    root = _record(None)
    records = [root, *(_record(root.id) for _ in range(3))]
    tokens = []
    for record in records:
        if tree:
            await store.create_conversation(record)
        binding = RunBinding(
            execution_id=f"exec-{secrets.token_hex(6)}",
            agent_id="agent-1",
            task_id="task-b",
            project_id="proj",
            conversation_id=record.id,
            provider="scripted",
            model_id=MODEL,
            cost_ceiling=record.budget_usd,
        )
        tokens.append(await app_gateway.issue(binding))
    return tokens


async def _batch(base_url: str, tokens: list[str], requests: int, concurrency: int) -> float:
    """Seconds to send ``requests`` spread over the tokens, ``concurrency`` at a time."""
    clients = [
        httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {t}"})
        for t in tokens
    ]
    queue = list(range(requests))

    async def worker() -> None:
        while queue:
            i = queue.pop()
            response = await clients[i % len(clients)].post("/chat/completions", json=BODY)
            assert response.status_code == 200, response.text

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    for client in clients:
        await client.aclose()
    return elapsed


async def main(requests: int, rounds: int, concurrency: int, store_url: str | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        config = GatewayConfig(
            providers=[
                ProviderConfig(name="scripted", kind="scripted", models=(MODEL,), script="echo")
            ],
            prices={MODEL: ModelPrice(input_per_mtok_usd=Decimal(3), output_per_mtok_usd=15)},
            signing_key_file=Path(scratch) / "gateway.key",
        )
        store = await open_store(store_url or Path(scratch) / "store.db")
        app = create_gateway_app(config, signer_for(config), store)
        results: dict[str, list[tuple[float, float]]] = {"no tree": [], "tree": []}
        async with serve_embedded(app, tcp_port=0) as endpoints:
            assert endpoints.tcp_base_url
            for round_ in range(rounds + 1):  # round 0 warms up: not counted
                for name in ("no tree", "tree") if round_ % 2 else ("tree", "no tree"):
                    tokens = await _tokens(app.gateway, store, name == "tree")
                    cpu = time.process_time()
                    wall = await _batch(endpoints.tcp_base_url, tokens, requests, concurrency)
                    cpu = time.process_time() - cpu
                    if round_:
                        results[name].append((wall, cpu))
        await app.gateway.aclose()
        await store.close()
    load = os.getloadavg()[0]
    print(f"{requests} requests x {rounds} rounds, concurrency {concurrency}, load {load:.1f}")
    per = {}
    for name, runs in results.items():
        wall_ms = statistics.median(w for w, _ in runs) / requests * 1000
        cpu_ms = statistics.median(c for _, c in runs) / requests * 1000
        per[name] = (wall_ms, cpu_ms)
        print(f"{name:8s}: {wall_ms:.3f} ms wall/request, {cpu_ms:.3f} ms CPU/request (process)")
    ratio_wall = per["tree"][0] / per["no tree"][0]
    ratio_cpu = per["tree"][1] / per["no tree"][1]
    print(f"tree / no tree: {ratio_wall:.2f}x wall, {ratio_cpu:.2f}x CPU")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--store", default=None, help="store URL (default: a SQLite file)")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds, args.concurrency, args.store))
