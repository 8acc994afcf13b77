"""Admission near the ceiling, at the service level (in-memory ledger fake, no HTTP)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from synthorg.domain.binding import RunBinding
from synthorg.gateway.config import GatewayConfig, ModelPrice, ProviderConfig
from synthorg.gateway.ledger_memory import MemoryLedger
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.refusals import GatewayRefusal
from synthorg.gateway.scripted import echo
from synthorg.gateway.service import Gateway
from synthorg.gateway.signer import GatewaySigner
from synthorg.gateway.wire import ChatMessage, ChatRequest, Usage


async def test_serial_mode_admits_one_request_at_a_time() -> None:
    config = GatewayConfig(
        providers=[ProviderConfig(name="s", kind="scripted", models=("m",), script="echo")],
        prices={
            "m": ModelPrice(input_per_mtok_usd=Decimal(0), output_per_mtok_usd=Decimal(1_000_000))
        },
    )
    signer = GatewaySigner(b"k" * 32, served=config.serves, max_ttl_s=config.token_ttl_s)
    gateway = Gateway(config, signer, MemoryLedger(), {"s": ScriptedProvider({}, default=echo)})
    binding = RunBinding(
        execution_id="e",
        agent_id="a",
        task_id="t",
        project_id="p",
        conversation_id="c",
        provider="s",
        model_id="m",
        cost_ceiling=Decimal(10),
    )
    claims = signer.verify(await gateway.issue(binding))
    request = ChatRequest(
        model="m", messages=[ChatMessage(role="user", content="x")], max_tokens=4
    )  # worst case $4: two fit in $10, the third does not
    in_flight, peak, outcomes = 0, 0, []

    async def one() -> None:
        nonlocal in_flight, peak
        try:
            ticket = await gateway.admit(claims, request)
        except GatewayRefusal as refusal:
            outcomes.append(refusal.status)
            return
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        await gateway.settle(
            ticket, Usage(prompt_tokens=1, completion_tokens=3, total_tokens=4)
        )  # $3 each
        await gateway.persist(ticket)
        outcomes.append(200)

    first_two = [asyncio.create_task(one()) for _ in range(2)]
    await asyncio.sleep(0)
    assert peak == 2, "requests whose worst case fits run concurrently"
    await asyncio.gather(*first_two)
    peak = 0
    await asyncio.gather(*(one() for _ in range(10)))
    assert peak == 1, "near the ceiling, one request at a time"
    usage = await gateway.usage("e")
    assert usage.cost_usd == Decimal(12) and usage.status == "killed"
    assert outcomes.count(200) == 4 and outcomes.count(402) == 8
