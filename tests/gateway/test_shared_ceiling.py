"""Budgets across processes: gateways in separate processes admitting against one ledger.

Each worker gateway is its own process with its own connections to the same PostgreSQL
database, over real HTTP, in front of one loopback upstream. Whatever they admit at once, for
one execution (a zombie and its successor hold the same bearer's budget) or for the runs of one
delegation tree spread over them, the spend stays within the ceiling plus the largest
reservation of one admitted request. A gateway SIGKILLed (or SIGSTOPped) while holding a
reservation has it billed once, in full, after its lease; a stopped one that comes back adds
nothing more for it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .batch import Spec, body, reply, send_all, specs, within_one_request
from .cluster import Cluster, cluster
from .fake_upstream import Reply
from .harness import FAKE_MODEL, FAKE_PRICE

pytestmark = pytest.mark.postgres

REFUSED = (400, 401, 402, 403)


def _stalling(nonce: str, prompt: int = 400, cap: int = 300) -> dict[str, Any]:
    """A stream the upstream stalls after its first chunk: billed its whole reservation."""
    return {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"{nonce} " + "p" * prompt}],
        "max_tokens": cap,
        "stream": True,
    }


def _body_nonce(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]).split(" ", 1)[0]


@pytest.mark.parametrize("shape", ["zombie-and-successor", "tree-over-three-workers"])
async def test_workers_together_overshoot_by_one_request_at_most(
    tmp_path: Path, pg_schema: str, shape: str
) -> None:
    """Three stalled requests fit the budget; each worker gets four (all billed in full)."""
    workers = 2 if shape == "zombie-and-successor" else 3
    async with cluster(tmp_path, pg_schema, workers) as world:
        world.upstream.fake.plan = lambda body: Reply(text="o" * 64, ending="stall")
        worst = world.worst(_stalling("n0"))
        ceiling = worst * Decimal("3.5")
        if shape == "zombie-and-successor":  # one run, its bearer used through both
            conversation = await world.conversation(None)
            runs = [await world.open_run(conversation, ceiling)] * workers
        else:  # the root and two children, each run on its own worker
            root = await world.conversation(ceiling)
            children = [await world.conversation(None, root) for _ in range(2)]
            runs = [await world.open_run(c, ceiling) for c in (root, *children)]

        sends = [
            ((w, token), _stalling(f"n{secrets.token_hex(6)}"))
            for w, (_, token) in enumerate(runs)
            for _ in range(4)
        ]
        statuses = await send_all(lambda key: world.http(*key), sends, 180)
        admitted = sum(1 for s in statuses if s not in REFUSED)
        rows = await world.ledger(sorted({e for e, _ in runs}), admitted)
    spent = sum((row.cost_usd for row in rows), Decimal(0))
    assert admitted >= 3, statuses
    within_one_request(spent, ceiling, [worst] * admitted)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["sigkill", "sigstop"])
async def test_a_dead_holders_reservation_is_billed_once_after_its_lease(
    tmp_path: Path, pg_schema: str, sig: signal.Signals
) -> None:
    """Worker 0 holds a request (the upstream keeps it) and is killed or frozen; worker 1's
    request fits only once that hold is gone: it waits out the lease, the hold is billed its
    whole reservation (the upstream may have billed it), and a frozen holder that comes back
    and settles adds nothing more."""
    async with cluster(tmp_path, pg_schema, 2, lease_s=1.5) as world:
        conversation = await world.conversation(None)
        held, late = f"n{secrets.token_hex(6)}", f"n{secrets.token_hex(6)}"
        held_body = {**_stalling(held), "stream": False}
        late_body = {**_stalling(late), "stream": False}
        worst = world.worst(held_body)
        assert world.worst(late_body) == worst
        execution, token = await world.open_run(conversation, worst * Decimal("1.5"))
        world.upstream.fake.plan = lambda body: Reply(text="o" * 40)
        world.upstream.held.add(held)

        zombie = asyncio.create_task(_post(world, 0, token, held_body))
        async with asyncio.timeout(60):
            await world.upstream.wait_arrived(held)  # worker 0 holds its reservation
        assert await _holds(pg_schema) == 1
        os.kill(world.procs[0].pid, sig)

        async with asyncio.timeout(120):
            assert await _post(world, 1, token, late_body) == 200
        [row] = await world.ledger([execution], 2)
        record = next(r for r in world.upstream.fake.records if _body_nonce(r.body) == late)
        assert record.reported is not None
        late_cost = FAKE_PRICE.cost(*record.reported)
        assert row.cost_usd == worst + late_cost, "the dead hold billed in full, once"
        assert row.requests == 2
        assert await _holds(pg_schema) == 0

        if sig == signal.SIGSTOP:  # the zombie comes back and its request ends
            os.kill(world.procs[0].pid, signal.SIGCONT)
            world.upstream.release.set()
            async with asyncio.timeout(120):
                assert await zombie == 200
            await world.stop(0)  # its write happens after the answer; gone once written
            again = await world.store.get_execution(execution)
            assert again.cost_usd == row.cost_usd, "the expired hold was used twice"
            assert again.requests == 2
        else:
            with pytest.raises(httpx.HTTPError):
                await zombie


async def _post(world: Cluster, worker: int, token: str, body: dict[str, Any]) -> int:
    async with world.http(worker, token) as http:
        return (await http.post("/chat/completions", json=body)).status_code


async def _holds(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT count(*) FROM budget_reservations")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


@st.composite
def costly(draw: st.DrawFn) -> Spec:
    """A request sized against small ceilings, often a stream the upstream cuts or stalls
    (billed its whole reservation: the costliest honest outcome)."""
    stream = draw(st.booleans())
    cap = draw(st.integers(1, 600))
    return Spec(
        prompt=draw(st.integers(0, 3000)),
        tools=draw(st.integers(0, 1)),
        cap=cap,
        n=draw(st.one_of(st.none(), st.integers(1, 2))),
        stream=stream,
        out_chars=draw(st.integers(0, 4 * cap)),
        usage=draw(st.booleans()),
        ending=draw(st.sampled_from(["done", "cut", "stall", "stall"])) if stream else "done",
        error=draw(st.sampled_from([None] * 6 + [500])),
    )


@pytest.fixture
async def three(tmp_path: Path, pg_schema: str) -> Any:
    async with cluster(tmp_path, pg_schema, 3) as world:
        yield world


_STALLED = Spec(
    prompt=400,
    tools=0,
    cap=300,
    n=None,
    stream=True,
    out_chars=64,
    usage=False,
    ending="stall",
    error=None,
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tree=st.booleans(),
    share=st.decimals(min_value=Decimal("0.05"), max_value=Decimal("0.8"), places=2),
    batch=st.lists(
        st.tuples(
            st.one_of(costly(), costly(), specs()),
            st.integers(0, 2),
            st.integers(0, 2),
            st.sampled_from([0, 0, 0.05]),
        ),
        min_size=1,
        max_size=12,
    ),
)
@example(  # nine stalled streams over three workers, a third of them fit: 2-3x over before
    tree=False,
    share=Decimal("0.3"),
    batch=[(_STALLED, i % 3, i % 3, 0) for i in range(9)],
)
async def test_spend_across_workers_stays_within_one_reservation(
    three: Cluster,
    tree: bool,
    share: Decimal,
    batch: list[tuple[Spec, int, int, float]],
) -> None:
    """Random requests (sizes, caps, n, streams cut or stalled, errors, usage or not), each
    sent by one of three runs (one execution, or a tree's root and two children) through one
    of three worker gateways, some a little later than others; the ceiling is a share of
    what the whole batch could cost."""
    world = three
    by_nonce = {f"n{secrets.token_hex(6)}": item for item in batch}
    bodies = {nonce: body(nonce, item[0]) for nonce, item in by_nonce.items()}
    could = sum((world.worst(b) for b in bodies.values()), Decimal(0))
    ceiling = max(Decimal("0.01"), (could * share).quantize(Decimal("0.01")))
    if tree:
        root = await world.conversation(ceiling)
        children = [await world.conversation(None, root) for _ in range(2)]
        runs = [await world.open_run(c, ceiling) for c in (root, *children)]
    else:
        runs = [await world.open_run(await world.conversation(None), ceiling)] * 3
    world.upstream.fake.plan = partial(reply, {n: item[0] for n, item in by_nonce.items()})

    # Each request by one of the runs through one of the workers, some a little later.
    sends = [((worker, runs[run][1]), bodies[n]) for n, (_, run, worker, _) in by_nonce.items()]
    delays = [delay for _, _, _, delay in by_nonce.values()]
    statuses = await send_all(lambda key: world.http(*key), sends, 240, delays)
    admitted = [
        world.worst(b) for (_, b), s in zip(sends, statuses, strict=True) if s not in REFUSED
    ]
    rows = await world.ledger(sorted({e for e, _ in runs}), len(admitted))
    spent = sum((row.cost_usd for row in rows), Decimal(0))
    assert sum(row.requests for row in rows) == len(admitted)
    within_one_request(spent, ceiling, admitted)
