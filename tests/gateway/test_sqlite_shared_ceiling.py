"""Two gateway processes on one ledger share its holds (issue 30, finding 2).

On SQLite each process used to admit against its own memory: two processes spent 2.16x the
ceiling. Now both stores hold every admitted request's worst case in the ledger (SQLite under
its write lock, ``BEGIN IMMEDIATE``: it is one host), so however the requests split over the
processes, spend <= ceiling + one request's reservation. Both gateway kinds: the gateway as
``synthorg run``/``serve`` embed it (``gateway_proc``) and ``synthorg gateway serve``.
"""

from __future__ import annotations

import secrets
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from .batch import send_all, within_one_request
from .cluster import GatewayKind, cluster
from .fake_upstream import Reply
from .harness import FAKE_MODEL

REFUSED = (400, 401, 402, 403)


def _stalling(nonce: str, prompt: int = 400, cap: int = 300) -> dict[str, Any]:
    """A stream the upstream stalls after its first chunk: billed its whole reservation."""
    return {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"{nonce} " + "p" * prompt}],
        "max_tokens": cap,
        "stream": True,
    }


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return str(request.getfixturevalue("pg_schema"))


@pytest.mark.parametrize("kind", ["embedded", "standalone"])
@pytest.mark.parametrize("per_worker", [8, 16])
async def test_two_processes_on_one_ledger_overshoot_by_one_request_at_most(
    tmp_path: Path, store_url: str, kind: GatewayKind, per_worker: int
) -> None:
    """One run's bearer through two gateway processes, every request stalled (billed in
    full): before, on SQLite, each process admitted 3-4 of 3.5 reservations (~2x)."""
    async with cluster(tmp_path, store_url, 2, kind=kind) as world:
        world.upstream.fake.plan = lambda body: Reply(text="o" * 64, ending="stall")
        worst = world.worst(_stalling("n" + "0" * 12))
        ceiling = worst * Decimal("3.5")
        conversation = await world.conversation(None)
        execution, token = await world.open_run(conversation, ceiling)
        sends = [
            ((w, token), _stalling(f"n{secrets.token_hex(6)}"))
            for w in range(2)
            for _ in range(per_worker)
        ]
        statuses = await send_all(lambda key: world.http(*key), sends, 180)
        admitted = sum(1 for s in statuses if s not in REFUSED)
        [row] = await world.ledger([execution], admitted)
    assert admitted >= 3, statuses
    within_one_request(row.cost_usd, ceiling, [worst] * admitted)
