"""A delegated child's share across its runs, when a worker dies holding a request.

A tree's root has a budget and its child a share of it. Each run of the child is opened with
the ceiling the run service grants it (``committed_spend``, what ``LocalRunService`` uses),
sends requests through a worker gateway (its own process, on the shared PostgreSQL ledger) and
ends with one request the upstream keeps: the worker is SIGKILLed holding it, and the next run
resumes the child on a fresh worker, at once (the dead hold still live) or once its lease ran
out (expired, not yet billed). However many resumes, the child's billed spend stays within its
share plus one request's reservation, and the tree within the root's budget plus one.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from synthorg.domain.binding import RunBinding
from synthorg.service.tree import committed_spend

from .batch import Spec, body, reply, send
from .cluster import Cluster, cluster
from .fake_upstream import Reply

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REFUSED = (400, 401, 402, 403)
LEASE_S = 1.5


@st.composite
def filler(draw: st.DrawFn) -> Spec:
    """A request that completes (billed its usage, or its bound without usage; an upstream
    error nothing)."""
    cap = draw(st.integers(1, 600))
    return Spec(
        prompt=draw(st.integers(0, 3000)),
        tools=0,
        cap=cap,
        n=None,
        stream=False,
        out_chars=draw(st.integers(0, 4 * cap)),
        usage=draw(st.booleans()),
        ending="done",
        error=draw(st.sampled_from([None] * 5 + [500])),
    )


@dataclass(frozen=True)
class Round:
    """One run of the child: requests one after another (some by the root's run), then one
    the upstream keeps while the worker is killed; the next run starts once the dead hold has
    ``expired`` (else at once)."""

    fillers: list[tuple[Spec, bool]]
    held: Spec
    expired: bool


@st.composite
def rounds(draw: st.DrawFn) -> Round:
    return Round(
        fillers=draw(st.lists(st.tuples(filler(), st.booleans()), max_size=3)),
        held=replace(draw(filler()), error=None),
        expired=draw(st.booleans()),
    )


@pytest.fixture
async def world(tmp_path: Path, pg_schema: str) -> AsyncIterator[Cluster]:
    async with cluster(tmp_path, pg_schema, 1, lease_s=LEASE_S) as world:
        yield world


def _full(prompt: int, cap: int) -> Spec:
    """A request billed close to its whole reservation (all its output, usage reported)."""
    return Spec(prompt, 0, cap, None, False, 4 * cap, True, "done", None)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=st.lists(rounds(), min_size=1, max_size=3),
    tail=st.lists(filler(), min_size=1, max_size=4),
    share=st.decimals(min_value=Decimal("0.2"), max_value=Decimal("0.9"), places=2),
    of_root=st.decimals(min_value=Decimal("0.3"), max_value=Decimal("1"), places=2),
)
@example(  # the held request is the largest; the resumed run spends its whole ceiling
    plan=[Round(fillers=[(_full(200, 100), False)], held=_full(2000, 600), expired=False)],
    tail=[_full(200, 100)],
    share=Decimal("0.9"),
    of_root=Decimal("0.3"),
)
@example(  # the same, resumed once the dead hold has expired (not billed yet), twice
    plan=[Round([(_full(200, 100), False)], _full(2000, 600), True)] * 2,
    tail=[_full(200, 100)],
    share=Decimal("0.9"),
    of_root=Decimal("0.3"),
)
async def test_a_childs_share_holds_across_resumes_after_a_dead_holder(
    world: Cluster, plan: list[Round], tail: list[Spec], share: Decimal, of_root: Decimal
) -> None:
    """The child's share is a fraction of what its requests could cost, the root's budget
    the share over ``of_root``; after the last resume the child spends until refused."""
    by_nonce: dict[str, Spec] = {}
    world.upstream.fake.plan = partial(_reply, by_nonce)

    def sized(spec: Spec) -> tuple[str, dict[str, Any], Decimal]:
        nonce = f"n{secrets.token_hex(6)}"
        by_nonce[nonce] = spec
        payload = body(nonce, spec)
        return nonce, payload, world.worst(payload)

    could = sum((world.worst(body("n", s)) for r in plan for s in [r.held]), Decimal(0))
    could += sum((world.worst(body("n", s)) for r in plan for s, _ in r.fillers), Decimal(0))
    could += sum((world.worst(body("n", s)) for s in tail), Decimal(0))
    child_share = max(Decimal("0.01"), (could * share).quantize(Decimal("0.01")))
    budget = (child_share / of_root).quantize(Decimal("0.01"))
    root = await world.conversation(budget)
    child = await world.conversation(child_share, root)
    root_run = await world.open_run(root, budget)  # a run of the root spends alongside
    admitted: list[Decimal] = []  # every admitted request's reservation
    by_child: list[Decimal] = []
    runs: list[str] = []
    dead = 0  # holds whose holder was killed

    async def through(token: str, spec: Spec, mine: bool) -> int:
        _, payload, worst = sized(spec)
        async with world.http(len(world.bases) - 1, token) as http:
            status = await send(http, payload)
        if status not in REFUSED:
            admitted.append(worst)
            if mine:
                by_child.append(worst)
        return status

    async def resume() -> str:
        """What the run service does for a run of the child: supersede, grant, open."""
        if runs:
            await world.gateway.kill_execution(runs[-1], "superseded")
        record = await world.store.get_conversation(child)
        spent = await committed_spend(world.store, child)
        grant = RunBinding.of(record, "unused", spent=spent)
        execution, token = await world.open_run(child, grant.cost_ceiling)
        runs.append(execution)
        return token

    for turn in plan:
        token = await resume()
        for spec, by_root in turn.fillers:
            await through(root_run[1] if by_root else token, spec, not by_root)
        nonce, payload, worst = sized(turn.held)
        world.upstream.held.add(nonce)
        worker = len(world.bases) - 1
        async with world.http(worker, token) as http:
            posted = asyncio.create_task(send(http, payload))
            arrived = asyncio.create_task(world.upstream.wait_arrived(nonce))
            async with asyncio.timeout(120):
                await asyncio.wait({posted, arrived}, return_when=asyncio.FIRST_COMPLETED)
            if arrived.done():  # the worker holds its reservation: it dies holding it
                admitted.append(worst)
                by_child.append(worst)
                dead += 1
                os.kill(world.procs[worker].pid, signal.SIGKILL)
                await world.procs[worker].wait()
                if turn.expired:
                    await _lease_ran_out(world.store_url, runs[-1])
            arrived.cancel()
            await asyncio.gather(posted, return_exceptions=True)
        if world.procs[worker].returncode is not None:
            await world.spawn(1)

    token = await resume()
    for attempt in range(40):  # the last run spends until its ceiling refuses it
        if await through(token, tail[attempt % len(tail)], True) == 402:
            break

    executions = [*runs, root_run[0]]
    await world.ledger(executions, len(admitted) - dead)  # all settled but the dead holds
    billed = await _billed(world.store_url, executions)
    child_billed = sum((billed[e] for e in runs), Decimal(0))
    tree_billed = child_billed + billed[root_run[0]]
    if by_child:
        assert child_billed <= child_share + max(by_child), (
            f"the child billed ${child_billed} of its ${child_share} share over {len(runs)} "
            f"runs: ${child_billed - child_share - max(by_child)} past one request "
            f"(${max(by_child)})"
        )
    if admitted:
        assert tree_billed <= budget + max(admitted), (
            f"the tree billed ${tree_billed} of its ${budget} budget"
        )


def _reply(by_nonce: dict[str, Spec], payload: dict[str, Any]) -> Reply:
    """The answer its spec says; a request kept from an earlier example gets an empty one."""
    if _body_nonce(payload) not in by_nonce:
        return Reply(text="")
    return reply(by_nonce, payload)


def _body_nonce(payload: dict[str, Any]) -> str:
    return str(payload["messages"][0]["content"]).split(" ", 1)[0]


async def _lease_ran_out(url: str, execution_id: str) -> None:
    """Wait until the execution's holds are past their lease (by the ledger's clock)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        async with asyncio.timeout(60):
            while True:
                cur = await conn.execute(
                    "SELECT count(*) FROM budget_reservations"
                    " WHERE execution_id = %s AND expires_at >= clock_timestamp()",
                    (execution_id,),
                )
                row = await cur.fetchone()
                if row is not None and row[0] == 0:
                    return
                await asyncio.sleep(0.05)  # polling the ledger's clock


async def _billed(url: str, execution_ids: list[str]) -> dict[str, Decimal]:
    """Each execution's billed spend once its dead holds are billed: each is billed its whole
    amount at the first admission after its lease, so it is the ledger spend plus them."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT e.execution_id, e.cost_usd + coalesce((SELECT sum(r.amount)"
            " FROM budget_reservations r WHERE r.execution_id = e.execution_id), 0)"
            " FROM executions e WHERE e.execution_id = ANY(%s)",
            (execution_ids,),
        )
        return {str(eid): Decimal(str(total)) for eid, total in await cur.fetchall()}
