"""Batches of concurrent chat requests of random shapes, sent at once, and the ceiling invariant
they are judged by: spend <= ceiling + the largest reservation of one admitted request.

Shared by the ceiling properties: in one process (``drive``, with the gateway's tickets) and
across worker processes (``send_all``, judged on the ledger).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any, Literal

import httpx
from hypothesis import strategies as st

from synthorg.gateway.ticket import Ticket
from synthorg.store.protocol import ExecutionUsage

from .fake_upstream import Reply
from .harness import FAKE_MODEL, FakeHarness

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


def body(nonce: str, spec: Spec) -> dict[str, Any]:
    """The request of ``spec``, its first message starting with ``nonce``."""
    out: dict[str, Any] = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": nonce + " " + "p" * spec.prompt}],
    }
    if spec.tools:
        out["tools"] = [TOOL] * spec.tools
    if spec.cap is not None:
        out["max_tokens"] = spec.cap
    if spec.n is not None:
        out["n"] = spec.n
    if spec.stream:
        out["stream"] = True
    return out


def reply(by_nonce: dict[str, Spec], body: dict[str, Any]) -> Reply:
    """The upstream's answer to a request of the batch (found by its nonce)."""
    spec = by_nonce[body["messages"][0]["content"].split(" ", 1)[0]]
    if spec.error:
        return Reply(status=spec.error, error={"message": "no", "type": "server_error"})
    return Reply(text="o" * spec.out_chars, usage=spec.usage, ending=spec.ending, cut_after=2)


async def send(http: httpx.AsyncClient, body: dict[str, Any]) -> int:
    """POST ``body`` (reading a stream to its end): the status."""
    if not body.get("stream"):
        return (await http.post("/chat/completions", json=body)).status_code
    async with http.stream("POST", "/chat/completions", json=body) as response:
        async for _ in response.aiter_bytes():
            pass
        return response.status_code


async def send_all[K: Hashable](
    client: Callable[[K], httpx.AsyncClient],
    sends: Sequence[tuple[K, dict[str, Any]]],
    timeout_s: float,
    delays: Sequence[float] = (),
) -> list[int]:
    """Send every (key, body) at once, each through ``client(key)`` (one client a key): the
    statuses, in order. ``delays[i]``, where given, holds the i-th back that long (a later
    arrival: an input of the example, not a wait for anything)."""
    clients = {key: client(key) for key, _ in sends}

    async def one(i: int, key: K, payload: dict[str, Any]) -> int:
        if i < len(delays) and delays[i]:
            await asyncio.sleep(delays[i])
        return await send(clients[key], payload)

    try:
        async with asyncio.timeout(timeout_s):
            return await asyncio.gather(*(one(i, k, b) for i, (k, b) in enumerate(sends)))
    finally:
        for http in clients.values():
            await http.aclose()


def within_one_request(spent: Decimal, ceiling: Decimal, reservations: Iterable[Decimal]) -> None:
    """The invariant: at most the ceiling plus the largest reservation of one admitted request
    (``reservations``: every admitted request's)."""
    largest = max(reservations, default=None)
    if largest is not None:
        assert spent <= ceiling + largest, (
            f"spent ${spent} of a ${ceiling} ceiling: more than one request (${largest}) over"
        )


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
    async with asyncio.timeout(timeout_s):
        statuses = await send_all(fake.http, sends, timeout_s)
        usages = [await fake.gateway.usage(e) for e in executions]  # waits for the settles
        for execution_id in executions:
            await fake.gateway.flush(execution_id)
    assert len(tickets) == len({id(t) for t in tickets}), "each request settled once"
    assert len(tickets) == sum(1 for s in statuses if s not in (400, 402)), statuses
    return usages, tickets


def within_one_reservation(spent: Decimal, ceiling: Decimal, tickets: list[Ticket]) -> None:
    """The invariant: what was spent is what the tickets cost, at most the ceiling plus the
    largest reservation of one admitted request."""
    assert spent == sum((t.cost for t in tickets), Decimal(0))
    within_one_request(spent, ceiling, (t.reserved for t in tickets))
