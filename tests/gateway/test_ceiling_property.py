"""The ceiling invariant as a property, over real HTTP through the gateway to a loopback upstream.

Any interleaving of concurrent requests of one run (random prompt sizes, tool schemas, output
caps, n, streaming or not, streams the upstream cuts or stalls, answers with and without usage,
upstream errors) ends with:

- spend <= ceiling + the largest reservation of one admitted request;
- every admitted request settled exactly once, and the ledger equal to the sum of what the
  upstream reported, or, where it reported nothing, the gateway's conservative estimate.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import partial
from typing import Any, Literal

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import Usage
from synthorg.store.protocol import ExecutionUsage

from .fake_upstream import Record, Reply
from .harness import FAKE_MODEL, FAKE_PRICE, FakeHarness

TOOL = {
    "type": "function",
    "function": {
        "name": "tool",
        "description": "t" * 1000,
        "parameters": {"type": "object", "properties": {}},
    },
}


@dataclass(frozen=True)
class Spec:
    """One request of the interleaving and how the upstream treats it."""

    prompt: int
    tools: int
    cap: int | None
    n: int | None
    stream: bool
    out_chars: int
    usage: bool
    ending: Literal["done", "cut", "stall"]
    error: int | None


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    stream = draw(st.booleans())
    cap = draw(st.one_of(st.none(), st.integers(1, 600)))
    # An honest upstream: never more output than the cap (16384 when the caller sent none).
    out_chars = draw(st.integers(0, min(4 * (cap or 16384), 2400)))
    ending = draw(st.sampled_from(["done"] * 6 + ["cut"] * 2 + ["stall"])) if stream else "done"
    return Spec(
        prompt=draw(st.integers(0, 6000)),
        tools=draw(st.integers(0, 3)),
        cap=cap,
        n=draw(st.one_of(st.none(), st.integers(1, 3))),
        stream=stream,
        out_chars=out_chars,
        usage=draw(st.booleans()),
        ending=ending,
        error=draw(st.sampled_from([None] * 8 + [429, 500])),
    )


def _body(nonce: str, spec: Spec) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": nonce + " " + "p" * spec.prompt}],
    }
    if spec.tools:
        body["tools"] = [TOOL] * spec.tools
    if spec.cap is not None:
        body["max_tokens"] = spec.cap
    if spec.n is not None:
        body["n"] = spec.n
    if spec.stream:
        body["stream"] = True
    return body


def reply(by_nonce: dict[str, Spec], body: dict[str, Any]) -> Reply:
    """The upstream's answer to a request of the batch (found by its nonce)."""
    spec = by_nonce[body["messages"][0]["content"].split(" ", 1)[0]]
    if spec.error:
        return Reply(status=spec.error, error={"message": "no", "type": "server_error"})
    return Reply(text="o" * spec.out_chars, usage=spec.usage, ending=spec.ending, cut_after=2)


async def _send(http: httpx.AsyncClient, body: dict[str, Any]) -> int:
    if not body.get("stream"):
        return (await http.post("/chat/completions", json=body)).status_code
    async with http.stream("POST", "/chat/completions", json=body) as response:
        async for _ in response.aiter_bytes():
            pass
        return response.status_code


async def drive(
    fake: FakeHarness,
    by_nonce: dict[str, Spec],
    sends: list[tuple[str, dict[str, Any]]],
    executions: list[str],
    timeout_s: float,
) -> tuple[list[ExecutionUsage], list[Ticket]]:
    """Send every (bearer, body) at once, the upstream answering each as ``by_nonce`` says:
    the usage of each of ``executions`` once all is settled and written, and their tickets
    (each request settled once, every one the gateway admitted)."""
    fake.upstream.plan = partial(reply, by_nonce)
    ours = set(executions)
    tickets: list[Ticket] = []
    fake.gateway.on_settle(lambda t: tickets.append(t) if t.claims.execution_id in ours else None)
    clients = {token: fake.http(token) for token, _ in sends}
    try:
        async with asyncio.timeout(timeout_s):
            statuses = await asyncio.gather(*(_send(clients[token], body) for token, body in sends))
            usages = [await fake.gateway.usage(e) for e in executions]  # waits for the settles
            for execution_id in executions:
                await fake.gateway.flush(execution_id)
    finally:
        for client in clients.values():
            await client.aclose()
    assert len(tickets) == len({id(t) for t in tickets}), "each request settled once"
    assert len(tickets) == sum(1 for s in statuses if s not in (400, 402)), statuses
    return usages, tickets


def within_one_reservation(spent: Decimal, ceiling: Decimal, tickets: list[Ticket]) -> None:
    """The invariant: what was spent is what the tickets cost, at most the ceiling plus the
    largest reservation of one admitted request."""
    assert spent == sum((t.cost for t in tickets), Decimal(0))
    if tickets:
        assert spent <= ceiling + max(t.reserved for t in tickets), (
            f"spent ${spent} of a ${ceiling} ceiling: more than one request over"
        )


_EMPTY = Spec(
    prompt=366,
    tools=1,
    cap=10,
    n=None,
    stream=False,
    out_chars=0,
    usage=False,
    ending="done",
    error=None,
)
"""An empty answer whose bill (its upper-bound prompt) crosses a $1 ceiling: it kills the run
without being cut. In a random batch, whether such a request is the one that crosses depends
on the order the gateway admits the batch in (the property failed on a loaded machine only)."""


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ceiling=st.decimals(min_value=Decimal("0.01"), max_value=Decimal(30), places=2),
    batch=st.lists(specs(), min_size=1, max_size=12),
)
@example(ceiling=Decimal("1.00"), batch=[_EMPTY])
@example(ceiling=Decimal("1.00"), batch=[replace(_EMPTY, stream=True)])
async def test_spend_stays_within_one_reservation_of_the_ceiling(
    fake: FakeHarness, ceiling: Decimal, batch: list[Spec]
) -> None:
    by_nonce = {f"n{secrets.token_hex(6)}": spec for spec in batch}
    binding, token = await fake.run(ceiling)
    sends = [(token, _body(nonce, spec)) for nonce, spec in by_nonce.items()]
    (usage,), tickets = await drive(fake, by_nonce, sends, [binding.execution_id], 120)

    assert usage.requests == len(tickets)
    within_one_reservation(usage.cost_usd, ceiling, tickets)
    records = {r.body["messages"][0]["content"].split(" ", 1)[0]: r for r in fake.upstream.records}
    for ticket in tickets:
        nonce = str(ticket.request.messages[0].content).split(" ", 1)[0]
        assert ticket.cost == _expected(ticket, by_nonce[nonce], records[nonce]), ticket


def _expected(ticket: Ticket, spec: Spec, record: Record) -> Decimal:
    """What the request must have been billed, from what the upstream did."""
    bounds = ticket.bounds
    if spec.error:
        assert ticket.billed_as == "refused"
        return Decimal(0)  # refused by the upstream before generating: not billed
    if ticket.billed_as == "answered" and (
        spec.usage or not record.finished or ticket.out_bytes < spec.out_chars
    ):
        # Cut by the gateway at the ceiling: the upper-bound prompt and every byte received
        # (the upstream may have finished writing what the gateway never read: the race
        # hypothesis found; what was never received is covered by the one-request margin).
        # Known by what was relayed, not by ``killed``, which marks whichever request's bill
        # crossed the ceiling: a whole answer too (an empty one failed ``0 < out_bytes``).
        # A whole answer without usage is billed the same, cut after its last byte or not.
        assert spec.stream and ticket.killed and 0 < ticket.out_bytes <= spec.out_chars
        return _cost(bounds.unreported(ticket.out_bytes))
    if not record.finished:  # the upstream cut or stalled the stream
        assert ticket.billed_as == "incomplete"
        return _cost(bounds.reservation())
    if spec.usage:
        assert ticket.billed_as == "reported" and record.reported is not None
        return FAKE_PRICE.cost(*record.reported)  # the upstream's own figures
    assert ticket.billed_as == "answered"
    return _cost(bounds.unreported(spec.out_chars))


def _cost(usage: Usage) -> Decimal:
    return FAKE_PRICE.cost(usage.prompt_tokens, usage.completion_tokens)
