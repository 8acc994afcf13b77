"""Red-team: a run's requests still in flight when it finishes count against its tree.

A hostile agent leaves streams open (a background process with the run's bearer) and lets its
run end. The next run of the same tree must see those streams' reservations: they are billed
when they end, whoever is spending then.
"""

from __future__ import annotations

import asyncio
import contextlib
from decimal import ROUND_UP, Decimal
from typing import Any

import pytest

from synthorg.gateway.wire import ChatRequest

from .fake_upstream import Reply
from .harness import FAKE_MODEL, FakeHarness, tree_conversation
from .test_tree_ceiling_property import _open

_CENT = Decimal("0.000001")


def _request(tag: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": tag}]}
    if stream:
        body["stream"] = True  # no cap: it reserves the model's whole output
    else:
        body["max_tokens"] = 8
    return body


@pytest.mark.parametrize("fake", [120.0], indirect=True)  # long enough to hold a stall
async def test_streams_left_open_by_a_finished_run_count_against_the_next_run_of_its_tree(
    fake: FakeHarness,
) -> None:
    fake.upstream.plan = lambda body: Reply(
        text="o" * 20, ending="stall" if body.get("stream") else "done", cut_after=1
    )
    stall = _request("stall", stream=True)
    gateway = fake.gateway
    worst = gateway.bounds(gateway.forwarded(ChatRequest.model_validate(stall), FAKE_MODEL)).worst
    ceiling = (3 * worst).quantize(_CENT, rounding=ROUND_UP)
    root = tree_conversation(ceiling)
    first_exec, first_token = await _open(fake, root)

    async def hold(http: Any) -> None:
        async with http.stream("POST", "/chat/completions", json=stall) as response:
            async for _ in response.aiter_bytes():
                pass

    first = fake.http(first_token)
    held = [asyncio.create_task(hold(first)) for _ in range(2)]

    async def both_stalled() -> None:
        while len(fake.upstream.records) < 2:
            await asyncio.sleep(0.02)  # polled under the deadline below

    await asyncio.wait_for(both_stalled(), 60)
    await gateway.finish_execution(first_exec, "the loop ended")  # what the runner does

    # The next run of the root (a resume, a message): its ceiling is what the ledger says is left.
    spent_so_far = (await fake.store.get_execution(first_exec)).cost_usd
    second_exec, second_token = await _open(fake, root, ceiling - spent_so_far)

    async def spend_all() -> None:
        async with fake.http(second_token) as http:
            for i in range(10_000):
                answer = await http.post("/chat/completions", json=_request(f"b{i}", False))
                if answer.status_code == 402:
                    return
                assert answer.status_code == 200, answer.text

    spender = asyncio.create_task(spend_all())
    # A correct gateway holds the spender while the held streams are in flight (the tree is
    # serial); a wrong one lets it spend the whole ceiling. Either way: end the streams then.
    await asyncio.wait({spender}, timeout=5)
    for task in held:
        task.cancel()
    for task in held:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await first.aclose()
    await asyncio.wait_for(spender, 120)

    async def first_billed() -> None:
        while (await fake.store.get_execution(first_exec)).requests < 2:
            await asyncio.sleep(0.02)  # polled under the deadline below

    await asyncio.wait_for(first_billed(), 60)
    await gateway.flush(second_exec)
    tree = await fake.store.tree_budget(root.id)
    assert tree is not None
    assert tree.spent <= ceiling + worst, (
        f"the tree spent ${tree.spent} of ${ceiling}; one request is at most ${worst}"
    )
