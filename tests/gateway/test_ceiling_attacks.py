"""The attacks of issue 13 (gateway findings 1-7), each replayed over real HTTP as a bearer holder.

Price $1000 per million tokens in and out; the FakeUpstream bills body bytes / 4 prompt tokens,
so tool schemas and tool results count as they do at a real provider.
"""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from synthorg.store.protocol import ExecutionStatus

from .fake_upstream import Reply
from .harness import FAKE_MODEL, FAKE_PRICE, FakeHarness

WAIT_S = 60.0  # generous: the machine is shared
TOOLS_8KB = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "d" * 900,
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for i in range(8)
]


def _upstream_cost(fake: FakeHarness) -> Decimal:
    """What the upstream would bill for every request it answered with usage."""
    return sum(
        (FAKE_PRICE.cost(*r.reported) for r in fake.upstream.records if r.reported),
        Decimal(0),
    )


async def _post(http: httpx.AsyncClient, **body: Any) -> httpx.Response:
    payload = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
    return await http.post("/chat/completions", json=payload)


async def test_tool_schemas_are_part_of_admission(fake: FakeHarness) -> None:
    """Finding 1: 64 racing requests with 8 KB of tools each on a $5 ceiling (was $133 spent)."""
    ceiling = Decimal(5)
    binding, token = await fake.run(ceiling)
    async with fake.http(token) as http:
        answers = await asyncio.gather(
            *(_post(http, tools=TOOLS_8KB, max_tokens=16) for _ in range(64))
        )
    assert {a.status_code for a in answers} <= {200, 402}
    usage = await fake.gateway.usage(binding.execution_id)
    largest = max(FAKE_PRICE.cost(*r.reported) for r in fake.upstream.records if r.reported)
    assert usage.cost_usd == _upstream_cost(fake), "billed what the upstream reported"
    assert usage.cost_usd - largest < ceiling, "never more than one request over the ceiling"
    assert [a.status_code for a in answers].count(200) == len(fake.upstream.records)


@pytest.mark.parametrize(
    "cap",
    [
        {"max_tokens": -1_000_000_000},
        {"max_completion_tokens": -1},
        {"max_tokens": 0},
        {"max_completion_tokens": 0},
        {"max_tokens": 1.5},
        {"max_tokens": 10.0},
        {"max_tokens": "100"},
        {"max_tokens": True},
    ],
)
async def test_invalid_output_caps_are_refused(fake: FakeHarness, cap: dict[str, Any]) -> None:
    """Finding 2: a negative cap made a negative reservation ($3.30 spent on $0.50)."""
    _, token = await fake.run(Decimal("0.5"))
    async with fake.http(token) as http:
        response = await _post(http, **cap)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert next(iter(cap)) in error["message"]
    assert fake.upstream.records == [], "nothing reached the upstream"


async def test_negative_caps_cannot_free_headroom_for_others(fake: FakeHarness) -> None:
    """Finding 2 as reported: 64 racing requests, half with a -1e9 cap, on a $0.50 ceiling."""
    ceiling = Decimal("0.5")
    binding, token = await fake.run(ceiling)
    async with fake.http(token) as http:
        answers = await asyncio.gather(
            *(
                _post(http, max_tokens=-1_000_000_000 if i % 2 else 64, messages=_prompt(400))
                for i in range(64)
            )
        )
    assert all(a.status_code in (200, 400, 402) for a in answers)
    usage = await fake.gateway.usage(binding.execution_id)
    largest = max(FAKE_PRICE.cost(*r.reported) for r in fake.upstream.records if r.reported)
    assert usage.cost_usd - largest < ceiling


def _prompt(chars: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "p" * chars}]


async def test_a_request_whose_minimum_cost_exceeds_the_rest_is_refused(
    fake: FakeHarness,
) -> None:
    """Finding 3: one 400 KB prompt on a $0.05 ceiling was sent and billed $100 (2,001x)."""
    binding, token = await fake.run(Decimal("0.05"))
    async with fake.http(token) as http:
        response = await _post(http, messages=_prompt(400_000), max_tokens=16)
    assert response.status_code == 402, response.text
    error = response.json()["error"]
    assert error["code"] == "request_exceeds_budget"
    # The figures: the request's minimum cost, what is left, the ceiling.
    assert "$0.05" in error["message"] and "left" in error["message"]
    assert fake.upstream.records == []
    usage = await fake.gateway.usage(binding.execution_id)
    assert usage.cost_usd == 0 and usage.status == ExecutionStatus.ACTIVE
    async with fake.http(token) as http:  # a small request still fits
        assert (await _post(http, max_tokens=16)).status_code == 200


async def test_a_cut_stream_is_billed_for_the_whole_request(fake: FakeHarness) -> None:
    """Finding 4: a stream cut at the ceiling was billed from message text only ($7 vs $127)."""
    fake.upstream.plan = lambda body: Reply(text="word " * 40_000, piece=256)
    ceiling = Decimal(20)  # more than the request's least cost ($12), less than its bill ($25)
    binding, token = await fake.run(ceiling)
    tools = TOOLS_8KB * 12  # ~100 KB of tool schemas: $25 of prompt at the upstream
    async with fake.client(token) as client:
        stream = await client.chat.completions.create(
            model=FAKE_MODEL,
            messages=[{"role": "user", "content": "go"}],
            tools=tools,  # type: ignore[arg-type]
            stream=True,
        )
        received = ""
        with pytest.raises(openai.APIError, match="cost ceiling"):
            async for chunk in stream:
                received += chunk.choices[0].delta.content or ""
    assert 0 < len(received) < 200_000, "cut mid-way"
    usage = await fake.gateway.usage(binding.execution_id)
    record = fake.upstream.records[0]
    upstream_prompt_cost = FAKE_PRICE.cost(record.body_bytes // 4, 0)
    assert usage.cost_usd >= upstream_prompt_cost, "the estimate covers the whole request"
    assert usage.status == ExecutionStatus.KILLED


async def test_a_completion_without_usage_is_billed_an_estimate(fake: FakeHarness) -> None:
    """Finding 5: a non-stream answer without usage was metered at $0; the ceiling never fired."""
    fake.upstream.plan = lambda body: Reply(text="x" * 400, usage=False)
    binding, token = await fake.run(Decimal("0.5"))
    statuses = []
    async with fake.http(token) as http:
        for _ in range(20):
            response = await _post(http, messages=_prompt(400), max_tokens=200)
            statuses.append(response.status_code)
            if response.status_code == 402:
                break
    assert statuses[-1] == 402, "the ceiling fires for a provider that reports no usage"
    usage = await fake.gateway.usage(binding.execution_id)
    billed_by_upstream = sum(FAKE_PRICE.cost(r.body_bytes // 4, 100) for r in fake.upstream.records)
    assert usage.cost_usd >= billed_by_upstream


async def test_a_stalled_stream_times_out_and_is_settled(fake: FakeHarness) -> None:
    """Finding 6: an upstream stalling mid-stream wedged the run; the request was never settled."""
    fake.upstream.plan = lambda body: Reply(text="y" * 64, ending="stall", cut_after=2)
    binding, token = await fake.run(Decimal(100))
    async with asyncio.timeout(WAIT_S), fake.client(token) as client:
        stream = await client.chat.completions.create(
            model=FAKE_MODEL, messages=[{"role": "user", "content": "go"}], stream=True
        )
        with pytest.raises(openai.APIError, match="stalled"):
            async for _ in stream:
                pass
        await fake.upstream.stall_ended.wait()  # the gateway hung up on the upstream
        usage = await fake.gateway.usage(binding.execution_id)  # waits for in-flight requests
        assert usage.requests == 1 and usage.cost_usd > 0
        fake.upstream.plan = lambda body: Reply(text="fine")
        reply = await client.chat.completions.create(
            model=FAKE_MODEL, messages=[{"role": "user", "content": "again"}]
        )
        assert reply.choices[0].message.content == "fine", "the run is not wedged"


async def test_a_client_that_hangs_up_mid_stream_is_settled(fake: FakeHarness) -> None:
    """Finding 6 (disconnect): the caller leaves while the upstream stalls; still settled."""
    fake.upstream.plan = lambda body: Reply(text="z" * 64, ending="stall", cut_after=2)
    binding, token = await fake.run(Decimal(100))
    async with asyncio.timeout(WAIT_S):
        async with fake.http(token) as http:
            body = {
                "model": FAKE_MODEL,
                "messages": [{"role": "user", "content": "go"}],
                "stream": True,
            }
            async with http.stream("POST", "/chat/completions", json=body) as response:
                assert response.status_code == 200
                await fake.upstream.stalled.wait()
        # the client is gone: the gateway must settle the request and release the upstream
        await fake.upstream.stall_ended.wait()
        usage = await fake.gateway.usage(binding.execution_id)
    assert usage.requests == 1 and usage.cost_usd > 0


async def test_upstream_rate_limit_keeps_retry_after_and_type(fake: FakeHarness) -> None:
    """Finding 7: a 429's retry-after was dropped and its error type rewritten."""
    error = {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}
    fake.upstream.plan = lambda body: Reply(
        status=429, error=error, headers={"retry-after": "7", "retry-after-ms": "7000"}
    )
    binding, token = await fake.run(Decimal(1))
    async with fake.http(token) as http:
        response = await _post(http)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.headers["retry-after-ms"] == "7000"
    got = response.json()["error"]
    assert (got["type"], got["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert "slow down" in got["message"]
    usage = await fake.gateway.usage(binding.execution_id)
    assert usage.requests == 1 and usage.cost_usd == 0, "a refused request is not billed"


@pytest.mark.parametrize(
    ("body", "word"),
    [
        ({"n": 0}, "n"),
        ({"n": -3}, "n"),
        ({"n": 1.5}, "n"),
        ({"n": 10_000}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "hacker", "content": "x"}]}, "role"),
        ({"messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]}, "file"),
    ],
)
async def test_invalid_requests_are_refused(
    fake: FakeHarness, body: dict[str, Any], word: str
) -> None:
    """Finding 7: invalid n, unknown roles and empty messages were forwarded."""
    _, token = await fake.run(Decimal(1))
    async with fake.http(token) as http:
        response = await _post(http, **body)
    assert response.status_code == 400, response.text
    assert word in response.json()["error"]["message"]
    assert fake.upstream.records == []


async def test_openai_nulls_pass_through(fake: FakeHarness) -> None:
    """Finding 7: finish_reason null in chunks and content null beside tool calls were dropped."""
    call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    completion = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": FAKE_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
    }
    chunks = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": FAKE_MODEL,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{**call, "index": 0}],
                    },
                    "finish_reason": None,
                }
            ],
        }
    ]
    fake.upstream.plan = lambda body: Reply(raw=completion, raw_chunks=chunks)
    _, token = await fake.run(Decimal(1))
    async with fake.http(token) as http:
        response = await _post(http)
        message = response.json()["choices"][0]["message"]
        assert "content" in message and message["content"] is None
        assert response.json()["choices"][0]["logprobs"] is None
        lines = []
        async with http.stream(
            "POST",
            "/chat/completions",
            json={
                "model": FAKE_MODEL,
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
            },
        ) as streamed:
            async for line in streamed.aiter_lines():
                if line.startswith("data: {"):
                    lines.append(json.loads(line[6:]))
    first = lines[0]["choices"][0]
    assert "finish_reason" in first and first["finish_reason"] is None
    assert "content" in first["delta"] and first["delta"]["content"] is None
