"""The hard cost kill: 402 at the ceiling, streams cut mid-way, racing requests never > one over."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import openai
import pytest

from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import ChatMessage
from synthorg.store.protocol import ExecutionStatus

from .harness import LOCAL_MODEL, PRICE, Harness

PROMPT = "p" * 400  # 100 tokens at 4 chars per token
REPLY = "r" * 400  # 100 tokens
PER_REQUEST = PRICE.cost(100, 100)  # $0.30


def always(text: str = REPLY) -> Any:
    def script(
        messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> ScriptedTurn:
        return ScriptedTurn.say(text)

    return script


async def _ask(client: openai.AsyncOpenAI, **kwargs: Any) -> str:
    """'ok' or the status code of the refusal."""
    try:
        await client.chat.completions.create(
            model=LOCAL_MODEL, messages=[{"role": "user", "content": PROMPT}], **kwargs
        )
    except openai.APIStatusError as exc:
        return str(exc.status_code)
    return "ok"


async def test_sequential_requests_stop_at_the_ceiling(harness: Harness) -> None:
    harness.local_scripts.set_script(LOCAL_MODEL, always())
    binding, token = await harness.run(model=LOCAL_MODEL, provider="scripted", ceiling=Decimal(1))
    async with harness.client(token) as client:
        results = [await _ask(client) for _ in range(6)]
        assert results == ["ok"] * 4 + ["402"] * 2
        with pytest.raises(openai.APIStatusError) as info:
            await client.chat.completions.create(
                model=LOCAL_MODEL, messages=[{"role": "user", "content": "x"}]
            )
    assert info.value.status_code == 402
    assert "cost ceiling of $1" in info.value.message
    assert info.value.code == "cost_ceiling_reached"
    usage = await harness.gateway.usage(binding.execution_id)
    assert usage.cost_usd == 4 * PER_REQUEST  # 1.2: the 4th request took it over, nothing after
    assert usage.requests == 4
    assert usage.status == ExecutionStatus.KILLED
    assert "ceiling" in usage.status_reason
    await harness.gateway.flush(binding.execution_id)
    row = await harness.store.get_execution(binding.execution_id)  # persisted, not just cached
    assert row.status == ExecutionStatus.KILLED


@pytest.mark.parametrize("max_tokens", [None, 100])
async def test_concurrent_requests_racing_the_ceiling(
    harness: Harness, max_tokens: int | None
) -> None:
    """32 racing requests: the cost exceeds the ceiling by at most the one request in flight."""
    harness.local_scripts.set_script(LOCAL_MODEL, always())
    harness.local_scripts.latency_s = 0.02  # so requests really overlap
    ceiling = Decimal(1)
    binding, token = await harness.run(model=LOCAL_MODEL, provider="scripted", ceiling=ceiling)
    extra = {} if max_tokens is None else {"max_tokens": max_tokens}
    async with harness.client(token) as client:
        results = await asyncio.gather(*(_ask(client, **extra) for _ in range(32)))
    assert set(results) <= {"ok", "402"}
    usage = await harness.gateway.usage(binding.execution_id)
    oks = results.count("ok")
    assert usage.requests == oks and usage.cost_usd == oks * PER_REQUEST
    assert usage.cost_usd >= ceiling, "the run was allowed to spend up to its ceiling"
    assert usage.cost_usd - PER_REQUEST < ceiling, "never more than one request over"
    assert oks == 4
    assert usage.status == ExecutionStatus.KILLED


async def test_concurrent_streams_racing_the_ceiling(harness: Harness) -> None:
    harness.local_scripts.set_script(LOCAL_MODEL, always())
    harness.local_scripts.latency_s = 0.01
    ceiling = Decimal("0.75")
    binding, token = await harness.run(model=LOCAL_MODEL, provider="scripted", ceiling=ceiling)

    async def stream_one(client: openai.AsyncOpenAI) -> str:
        try:
            stream = await client.chat.completions.create(
                model=LOCAL_MODEL,
                messages=[{"role": "user", "content": PROMPT}],
                stream=True,
                max_tokens=100,
            )
            async for _ in stream:
                pass
        except openai.APIStatusError as exc:
            return str(exc.status_code)
        except openai.APIError:
            return "cut"
        return "ok"

    reserved: list[Decimal] = []
    harness.gateway.on_settle(lambda ticket: reserved.append(ticket.reserved))
    async with harness.client(token) as client:
        results = await asyncio.gather(*(stream_one(client) for _ in range(16)))
    usage = await harness.gateway.usage(binding.execution_id)
    assert results.count("ok") + results.count("cut") == usage.requests == len(reserved)
    assert usage.cost_usd >= ceiling, "the run was allowed to spend up to its ceiling"
    assert usage.cost_usd <= ceiling + max(reserved), "over by at most one reservation"
    assert usage.status == ExecutionStatus.KILLED


async def test_stream_is_cut_when_it_crosses_the_ceiling(harness: Harness) -> None:
    long_reply = "word " * 2000  # 2500 tokens out = $5 at the test price
    harness.local_scripts.set_script(LOCAL_MODEL, always(long_reply))
    ceiling = Decimal("0.5")
    binding, token = await harness.run(model=LOCAL_MODEL, provider="scripted", ceiling=ceiling)
    tickets: list[Ticket] = []
    harness.gateway.on_settle(tickets.append)
    received = ""
    async with harness.client(token) as client:
        stream = await client.chat.completions.create(
            model=LOCAL_MODEL, messages=[{"role": "user", "content": "go"}], stream=True
        )
        with pytest.raises(openai.APIError, match=r"crossed its cost ceiling of \$0.5"):
            async for chunk in stream:
                for choice in chunk.choices:
                    received += choice.delta.content or ""
        assert 0 < len(received) < len(long_reply)
        assert await _ask(client) == "402"
    usage = await harness.gateway.usage(binding.execution_id)
    assert usage.status == ExecutionStatus.KILLED
    cut = tickets[0]
    assert ceiling <= usage.cost_usd <= ceiling + cut.reserved
    # Billed conservatively: the whole request's upper bound and a token per byte received,
    # the chunk that crossed included.
    assert usage.tokens_in == cut.bounds.prompt_max
    assert len(received) < usage.tokens_out <= len(received) + 16
    assert cut.bounds.least_so_far(usage.tokens_out) >= ceiling, "cut once certainly over"


async def test_no_ceiling_never_kills(harness: Harness) -> None:
    harness.local_scripts.set_script(LOCAL_MODEL, always())
    binding, token = await harness.run(model=LOCAL_MODEL, provider="scripted", ceiling=None)
    async with harness.client(token) as client:
        results = await asyncio.gather(*(_ask(client) for _ in range(10)))
    assert results == ["ok"] * 10
    usage = await harness.gateway.usage(binding.execution_id)
    assert usage.cost_usd == 10 * PER_REQUEST and usage.status == ExecutionStatus.ACTIVE
