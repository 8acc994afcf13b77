"""The money invariant, stated once, over adversarial interleavings (issue 30).

One run's bearer is used through two gateways on one ledger, each with its own connection to
it and its own memory (two processes, as far as the ledger can tell), plus a third that dies
with its requests in flight. Every batch starts its requests at once; each request is then
settled honestly, over-reported, answered without usage, cut (incomplete), refused by the
upstream, settled twice (a retry of the settle), or abandoned by its dying gateway. At the
end, once the dead gateway's holds have expired:

- the ledger has every bill as made (over-reports as reported) plus every abandoned request
  billed its whole reservation;
- what admission controls, the sum of min(bill, reservation), is within the ceiling plus one
  reservation;
- after an over-report, the run admits nothing more.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synthorg.domain.binding import RunBinding
from synthorg.domain.money import ZERO, room_left, total
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.refusals import GatewayRefusal
from synthorg.gateway.service import Gateway
from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import ChatRequest, Usage
from synthorg.store import StoreConfig, open_store
from synthorg.store.protocol import SharedBudgetLedger, Store

from .harness import FAKE_MODEL, fake_config

Ending = Literal["honest", "over", "answered", "incomplete", "refused", "twice", "abandoned"]
LEASE_S = 0.5


@dataclass(frozen=True)
class Step:
    """One request of a batch: which gateway, how big, and how it ends."""

    gateway: int
    prompt: int
    cap: int
    ending: Ending
    share: float
    """The fraction of its reservation an honest bill takes (output of an over-report: x50)."""


steps = st.builds(
    Step,
    gateway=st.integers(0, 1),
    # Sizes within 2x of each other: the bound (one reservation) stays tight enough to catch a
    # second process admitting against its own memory.
    prompt=st.integers(1500, 3000),
    cap=st.integers(150, 300),
    ending=st.sampled_from(
        ["honest"] * 4 + ["incomplete"] * 2 + ["over", "answered", "refused", "twice", "abandoned"]
    ),
    share=st.one_of(st.just(1.0), st.floats(0, 1)),  # often the whole reservation: adversarial
)


@dataclass
class World:
    config: GatewayConfig
    url: str
    stores: list[Store]
    gateways: list[Gateway]

    async def gateway(self) -> Gateway:
        """A gateway of its own (a process, to the ledger): its own store connection."""
        store = await open_store(StoreConfig(url=self.url))
        app = create_gateway_app(self.config, signer_for(self.config), store)
        self.stores.append(store)
        self.gateways.append(app.gateway)
        return app.gateway

    async def die(self, gateway: Gateway) -> None:
        """The gateway's process dies: no more renewals, its connections closed.

        Several abandoned requests die at once: the pair leaves the lists before the first
        await, so another death cannot shift the index this one found."""
        index = self.gateways.index(gateway)
        store = self.stores.pop(index)
        del self.gateways[index]
        await gateway.aclose()
        await store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    if request.param == "sqlite":
        url = str(tmp_path / "ledger.db")
    else:
        url = str(request.getfixturevalue("pg_schema"))
    config = fake_config(tmp_path, "http://127.0.0.1:9/v1", reservation_lease_s=LEASE_S)
    made = World(config, url, [], [])
    try:
        yield made
    finally:
        for gateway in made.gateways:
            await gateway.aclose()
        for store in made.stores:
            await store.close()


def _request(step: Step) -> ChatRequest:
    return ChatRequest.model_validate(
        {
            "model": FAKE_MODEL,
            "messages": [{"role": "user", "content": secrets.token_hex(4) + "p" * step.prompt}],
            "max_tokens": step.cap,
        }
    )


def _usage(ticket: Ticket, step: Step) -> Usage:
    bounds = ticket.bounds
    if step.ending == "over":
        prompt, out = bounds.prompt_max, bounds.output_max * 50
    else:
        prompt, out = int(bounds.prompt_min * step.share), int(bounds.output_max * step.share)
    return Usage(prompt_tokens=prompt, completion_tokens=out, total_tokens=prompt + out)


async def _admit(world: World, live: list[Gateway], token: str, step: Step) -> Ticket | None:
    """Admit ``step`` (None when refused); an abandoned request is sent by a process of its
    own that dies once it is admitted (its hold stays in the ledger until its lease runs out)."""
    dies = step.ending == "abandoned"
    gateway = await world.gateway() if dies else live[step.gateway]
    try:
        return await gateway.admit(gateway.authenticate(f"Bearer {token}"), _request(step))
    except GatewayRefusal:
        return None
    finally:
        if dies:
            await world.die(gateway)


async def _end(live: list[Gateway], step: Step, ticket: Ticket) -> None:
    """End an admitted request as ``step`` says."""
    if step.ending == "abandoned":
        return
    gateway = live[step.gateway]
    ending = step.ending
    if ending == "answered" or ending == "incomplete" or ending == "refused":
        await gateway.settle(ticket, None, ending)
    else:  # honest, over, twice: the upstream reported usage
        await gateway.settle(ticket, _usage(ticket, step))
    if step.ending == "twice":  # settled again (a retried settle): billed once
        await gateway.settle(ticket, None, "incomplete")
    await gateway.persist(ticket)


async def _batch(
    world: World, live: list[Gateway], token: str, batch: list[Step]
) -> list[tuple[Step, Ticket]]:
    """Admit the whole batch before ending any of it (all in flight at once, as far as the
    budget lets them), then end each as soon as it is admitted: the admitted requests."""
    pending: dict[asyncio.Task[Ticket | None], Step] = {}
    for step in batch:
        task = asyncio.create_task(_admit(world, live, token, step))
        pending[task] = step
        # Most admissions return at once; one that waits for a settle (the budget is full)
        # stays pending. A slow machine only makes the interleaving less adversarial.
        await asyncio.wait({task}, timeout=0.2)
    admitted: list[tuple[Step, Ticket]] = []
    while pending:
        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            step = pending.pop(task)
            ticket = task.result()
            if ticket is not None:
                admitted.append((step, ticket))
                await _end(live, step, ticket)
    return admitted


def invariant(
    ceiling: Decimal, spent: Decimal, settled: list[Ticket], abandoned: list[Ticket]
) -> None:
    """The money invariant: the ledger has every bill, and what admission controls is within
    one reservation of the ceiling (an over-report's excess is the provider's)."""
    bills = total(t.cost for t in settled) + total(t.reserved for t in abandoned)
    assert spent == bills, f"the ledger has ${spent}, the bills add up to ${bills}"
    controlled = total(min(t.cost, t.reserved) for t in settled) + total(
        t.reserved for t in abandoned
    )
    largest = max((t.reserved for t in (*settled, *abandoned)), default=ZERO)
    assert room_left(ceiling + largest, controlled) >= 0, (
        f"${controlled} admitted against a ${ceiling} ceiling: more than one ${largest} over"
    )


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(st.lists(steps, min_size=1, max_size=10), min_size=1, max_size=3),
    headroom=st.integers(1, 4),
)
async def test_the_money_invariant_over_adversarial_interleavings(
    world: World, batches: list[list[Step]], headroom: int
) -> None:
    live = [await world.gateway(), await world.gateway()]
    typical = live[0].bounds(
        live[0].forwarded(_request(Step(0, 2000, 200, "honest", 1)), FAKE_MODEL)
    )
    ceiling = typical.worst * headroom
    binding = RunBinding(
        execution_id=f"exec-{secrets.token_hex(5)}",
        agent_id="a",
        task_id="t",
        project_id="p",
        conversation_id=f"conv-{secrets.token_hex(5)}",
        provider="fake",
        model_id=FAKE_MODEL,
        cost_ceiling=ceiling,
    )
    token = await live[0].issue(binding)
    settled: list[Ticket] = []
    abandoned: list[Ticket] = []
    store = world.stores[world.gateways.index(live[0])]
    assert isinstance(store, SharedBudgetLedger)
    try:
        async with asyncio.timeout(120):
            for batch in batches:
                for step, ticket in await _batch(world, live, token, batch):
                    (abandoned if step.ending == "abandoned" else settled).append(ticket)
            if any(t.overreport for t in settled):  # nothing more admitted, through any gateway
                for gateway in live:
                    claims = gateway.authenticate(f"Bearer {token}")
                    with pytest.raises(GatewayRefusal):
                        await gateway.admit(claims, _request(batch[0]))
            conversation = binding.conversation_id
            while True:  # the dead gateways' holds expire and are billed (bounded above)
                committed = await store.committed_budget(conversation, [conversation])
                row = await live[0].ledger.get_execution(binding.execution_id)
                if committed == row.cost_usd:
                    break
                await asyncio.sleep(LEASE_S / 5)  # polling another process's lease running out
    finally:
        for gateway in live:
            await world.die(gateway)
    invariant(ceiling, row.cost_usd, settled, abandoned)
