"""The official openai client through the gateway to a scripted upstream over real HTTP."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from openai.types.chat import ChatCompletionMessageParam

from .harness import LOCAL_MODEL, PRICE, TOOLS, UPSTREAM_MODEL, Harness


def _assistant(message: Any) -> ChatCompletionMessageParam:
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in message.tool_calls
        ]
    return out  # type: ignore[return-value]


async def test_non_streaming_tool_calls_full_conversation(harness: Harness) -> None:
    binding, token = await harness.run()
    client = harness.client(token)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are a coder."},
        {"role": "user", "content": "Look at the repo."},
    ]
    first = await client.chat.completions.create(
        model=UPSTREAM_MODEL,
        messages=messages,
        tools=TOOLS,  # type: ignore[arg-type]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Listing files."
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.function.name == "terminal"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"command": "ls -la"}  # type: ignore[union-attr]
    assert call.id.startswith("call_")
    messages += [
        _assistant(choice.message),
        {"role": "tool", "tool_call_id": call.id, "content": "README.md"},
    ]

    second = await client.chat.completions.create(
        model=f"openai/{UPSTREAM_MODEL}",
        messages=messages,
        tools=TOOLS,  # type: ignore[arg-type]
    )
    calls = second.choices[0].message.tool_calls
    assert calls is not None and [c.function.name for c in calls] == ["terminal", "finish"]  # type: ignore[union-attr]
    ids = {c.id for c in calls} | {call.id}
    assert len(ids) == 3, "tool call ids are unique within the conversation"
    messages += [_assistant(second.choices[0].message)]
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in calls]

    third = await client.chat.completions.create(model=UPSTREAM_MODEL, messages=messages)
    assert third.choices[0].message.content == "The repository has a README. Done."
    assert third.choices[0].finish_reason == "stop"

    # Metering: the ledger holds exactly the upstream-reported usage, priced from the table.
    total_in = sum(r.usage.prompt_tokens for r in (first, second, third) if r.usage)
    total_out = sum(r.usage.completion_tokens for r in (first, second, third) if r.usage)
    usage = await harness.gateway.usage(binding.execution_id)
    assert (usage.requests, usage.tokens_in, usage.tokens_out) == (3, total_in, total_out)
    assert usage.cost_usd == PRICE.cost(total_in, total_out)
    # The upstream got the bare model name, not the openai/ prefix.
    assert [r.model for r in harness.upstream.requests] == [UPSTREAM_MODEL] * 3
    await client.close()


async def test_tool_call_ids_are_deterministic(harness: Harness) -> None:
    _, token = await harness.run()
    client = harness.client(token)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "go"}]
    a = await client.chat.completions.create(model=UPSTREAM_MODEL, messages=messages)
    b = await client.chat.completions.create(model=UPSTREAM_MODEL, messages=messages)
    assert a.choices[0].message.tool_calls and b.choices[0].message.tool_calls
    assert a.choices[0].message.tool_calls[0].id == b.choices[0].message.tool_calls[0].id
    await client.close()


async def test_streaming_tool_calls_and_include_usage(harness: Harness) -> None:
    binding, token = await harness.run()
    client = harness.client(token)
    stream = await client.chat.completions.create(
        model=UPSTREAM_MODEL,
        messages=[{"role": "user", "content": "Look at the repo."}],
        tools=TOOLS,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    text, args, names, ids, finish, usage = "", "", [], [], None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                if call.id:
                    ids.append(call.id)
                if call.function and call.function.name:
                    names.append(call.function.name)
                if call.function and call.function.arguments:
                    args += call.function.arguments
            finish = choice.finish_reason or finish
    assert text == "Listing files."
    assert names == ["terminal"] and json.loads(args) == {"command": "ls -la"}
    assert finish == "tool_calls" and len(ids) == 1
    assert usage is not None and usage.completion_tokens > 0
    ledger = await harness.gateway.usage(binding.execution_id)
    assert (ledger.tokens_in, ledger.tokens_out) == (usage.prompt_tokens, usage.completion_tokens)
    assert ledger.cost_usd == PRICE.cost(usage.prompt_tokens, usage.completion_tokens)
    # The gateway asked the upstream for usage even though metering, not the caller, needs it.
    assert harness.upstream.requests[-1].wants_usage_in_stream()
    await client.close()


async def test_streaming_without_include_usage_still_meters(harness: Harness) -> None:
    binding, token = await harness.run()
    client = harness.client(token)
    stream = await client.chat.completions.create(
        model=UPSTREAM_MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.usage is None for c in chunks), "usage chunk only when asked for"
    ledger = await harness.gateway.usage(binding.execution_id)
    assert ledger.requests == 1 and ledger.tokens_out > 0 and ledger.cost_usd > 0
    await client.close()


async def test_scripted_provider_in_gateway_streams_and_completes(harness: Harness) -> None:
    binding, token = await harness.run(model=LOCAL_MODEL, provider="scripted")
    client = harness.client(token)
    reply = await client.chat.completions.create(
        model=LOCAL_MODEL, messages=[{"role": "user", "content": "x"}]
    )
    assert reply.choices[0].message.tool_calls
    stream = await client.chat.completions.create(
        model=LOCAL_MODEL,
        messages=[{"role": "user", "content": "x"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [c.usage async for c in stream if c.usage]
    assert len(usage) == 1
    ledger = await harness.gateway.usage(binding.execution_id)
    assert ledger.requests == 2
    assert reply.usage is not None
    assert ledger.tokens_out == reply.usage.completion_tokens + usage[0].completion_tokens
    await client.close()


async def test_openhands_extra_fields_are_accepted(harness: Harness) -> None:
    """The OpenHands SDK sends reasoning_effort, prompt_cache_key, think/finish tools, ...."""
    _, token = await harness.run()
    client = harness.client(token)
    reply = await client.chat.completions.create(
        model=f"openai/{UPSTREAM_MODEL}",
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "sys"}]},  # type: ignore[list-item]
            {"role": "user", "content": "go"},
        ],
        tools=[*TOOLS, {"type": "function", "function": {"name": "think"}}],  # type: ignore[arg-type]
        extra_body={
            "reasoning_effort": "high",
            "prompt_cache_key": "abc",
            "metadata": {"x": 1},
            "unknown_future_field": [1, 2],
        },
        temperature=0.0,
        max_completion_tokens=1000,
    )
    assert reply.choices[0].message.tool_calls
    forwarded = harness.upstream.requests[-1].model_extra or {}
    assert forwarded.get("reasoning_effort") == "high"
    assert forwarded.get("prompt_cache_key") == "abc"
    await client.close()


async def test_models_lists_the_bound_model(harness: Harness) -> None:
    _, token = await harness.run()
    client = harness.client(token)
    models = [m.id async for m in client.models.list()]
    assert models == [UPSTREAM_MODEL]
    await client.close()


async def test_cost_is_decimal_exact(harness: Harness) -> None:
    binding, token = await harness.run()
    client = harness.client(token)
    for _ in range(3):
        await client.chat.completions.create(
            model=UPSTREAM_MODEL, messages=[{"role": "user", "content": "abc"}]
        )
    ledger = await harness.gateway.usage(binding.execution_id)
    assert isinstance(ledger.cost_usd, Decimal)
    assert ledger.cost_usd == PRICE.cost(ledger.tokens_in, ledger.tokens_out)
    await client.close()
