"""The Anthropic provider against a loopback fake of the Messages API, through the gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import pytest

from synthorg.domain.binding import RunBinding
from synthorg.errors import ConfigError
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig, ModelPrice, ProviderConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.providers.anthropic import AnthropicProvider
from synthorg.gateway.service import Gateway
from synthorg.store.protocol import Store

from .harness import TOOLS

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
MODEL = "claude-test"


class FakeAnthropic:
    """Answers like Anthropic: a tool_use first, then text once a tool_result comes back."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        self.bodies.append(request)
        self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        if scope["path"] != "/v1/messages" or self.headers[-1].get("x-api-key") != "sk-ant-test":
            await self._json(send, 401, {"type": "error", "error": {"message": "bad key"}})
            return
        answered = any(
            block.get("type") == "tool_result"
            for m in request["messages"]
            if isinstance(m["content"], list)
            for block in m["content"]
        )
        content: list[dict[str, Any]]
        if answered:
            content, stop = [{"type": "text", "text": "All files listed."}], "end_turn"
        else:
            content = [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "terminal",
                    "input": {"command": "ls"},
                },
            ]
            stop = "tool_use"
        usage = {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 5}
        if request.get("stream"):
            await self._stream(send, content, stop, usage)
        else:
            await self._json(
                send,
                200,
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": content,
                    "stop_reason": stop,
                    "usage": usage,
                },
            )

    async def _json(self, send: Send, status: int, body: dict[str, Any]) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})

    async def _stream(
        self, send: Send, content: list[dict[str, Any]], stop: str, usage: dict[str, int]
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )

        async def event(data: dict[str, Any]) -> None:
            line = f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()
            await send({"type": "http.response.body", "body": line, "more_body": True})

        await event(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_2",
                    "usage": {"input_tokens": 30, "cache_read_input_tokens": 5, "output_tokens": 1},
                },
            }
        )
        await event({"type": "ping"})
        for i, block in enumerate(content):
            if block["type"] == "text":
                await event(
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    }
                )
                for piece in (block["text"][:4], block["text"][4:]):
                    await event(
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": piece},
                        }
                    )
            else:
                await event(
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    }
                )
                raw = json.dumps(block["input"])
                for piece in (raw[:5], raw[5:]):
                    await event(
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        }
                    )
            await event({"type": "content_block_stop", "index": i})
        await event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop},
                "usage": {"output_tokens": usage["output_tokens"]},
            }
        )
        await event({"type": "message_stop"})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
async def anthropic_gateway(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[FakeAnthropic, str, str, Gateway]]:
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "sk-ant-test")
    fake = FakeAnthropic()
    async with serve_embedded(fake, tcp_port=0) as up:
        assert up.tcp_base_url
        config = GatewayConfig(
            providers=[
                ProviderConfig(
                    name="anthropic",
                    kind="anthropic",
                    base_url=up.tcp_base_url.removesuffix("/v1"),
                    api_key_env="TEST_ANTHROPIC_KEY",
                    models=(MODEL,),
                )
            ],
            prices={
                MODEL: ModelPrice(input_per_mtok_usd=Decimal(3), output_per_mtok_usd=Decimal(15))
            },
            signing_key_file=tmp_path / "k.key",
        )
        app = create_gateway_app(config, signer_for(config), store)
        binding = RunBinding(
            execution_id="exec-a",
            agent_id="a",
            task_id="t",
            project_id="p",
            conversation_id="c",
            provider="anthropic",
            model_id=MODEL,
        )
        token = await app.gateway.issue(binding)
        async with serve_embedded(app, tcp_port=0) as gw:
            assert gw.tcp_base_url
            yield fake, gw.tcp_base_url, token, app.gateway


async def test_tool_use_round_trip_non_streaming(
    anthropic_gateway: tuple[FakeAnthropic, str, str, Gateway],
) -> None:
    fake, base_url, token, gateway = anthropic_gateway
    async with openai.AsyncOpenAI(base_url=base_url, api_key=token, max_retries=0) as client:
        messages: list[Any] = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "List files."},
        ]
        first = await client.chat.completions.create(
            model=f"openai/{MODEL}",
            messages=messages,
            tools=TOOLS,
            tool_choice="auto",  # type: ignore[arg-type]
            max_tokens=300,
        )
        message = first.choices[0].message
        assert message.content == "Let me look."
        assert first.choices[0].finish_reason == "tool_calls"
        assert message.tool_calls and message.tool_calls[0].id == "toolu_01"
        assert json.loads(message.tool_calls[0].function.arguments) == {"command": "ls"}  # type: ignore[union-attr]
        assert first.usage and (first.usage.prompt_tokens, first.usage.completion_tokens) == (
            35,
            12,
        )
        messages += [
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "toolu_01", "content": "a.py b.py"},
        ]
        second = await client.chat.completions.create(model=MODEL, messages=messages)
        assert second.choices[0].message.content == "All files listed."
        assert second.choices[0].finish_reason == "stop"

    sent = fake.bodies[0]
    assert sent["system"] == "Be brief." and sent["model"] == MODEL and sent["max_tokens"] == 300
    assert sent["tools"][0] == {
        "name": "terminal",
        "description": "Run a shell command.",
        "input_schema": TOOLS[0]["function"]["parameters"],  # type: ignore[index]
    }
    assert sent["tool_choice"] == {"type": "auto"}
    assert fake.headers[0]["anthropic-version"] == "2023-06-01"
    follow_up = fake.bodies[1]["messages"]
    assert [m["role"] for m in follow_up] == ["user", "assistant", "user"]
    assert follow_up[1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "terminal",
        "input": {"command": "ls"},
    }
    assert follow_up[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.py b.py"}
    ]
    row = await gateway.usage("exec-a")
    assert (row.requests, row.tokens_in, row.tokens_out) == (2, 70, 24)


async def test_streaming_maps_events_to_chunks(
    anthropic_gateway: tuple[FakeAnthropic, str, str, Gateway],
) -> None:
    _, base_url, token, gateway = anthropic_gateway
    async with openai.AsyncOpenAI(base_url=base_url, api_key=token, max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "List files."}],
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        text, args, ids, finish, usage = "", "", [], None, None
        async for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or ():
                    ids += [call.id] if call.id else []
                    args += (call.function.arguments or "") if call.function else ""
                finish = choice.finish_reason or finish
    assert text == "Let me look." and ids == ["toolu_01"] and json.loads(args) == {"command": "ls"}
    assert finish == "tool_calls"
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (35, 12)
    row = await gateway.usage("exec-a")
    assert (row.tokens_in, row.tokens_out) == (35, 12)
    assert row.cost_usd == (Decimal(3) * 35 + Decimal(15) * 12) / 1_000_000


async def test_upstream_auth_failure_is_a_502(tmp_path: Path) -> None:
    fake = FakeAnthropic()
    async with serve_embedded(fake, tcp_port=0) as up:
        assert up.tcp_base_url
        provider = AnthropicProvider("a", up.tcp_base_url, api_key="wrong")
        from synthorg.gateway.providers.base import ProviderError
        from synthorg.gateway.wire import ChatMessage, ChatRequest

        request = ChatRequest(model=MODEL, messages=[ChatMessage(role="user", content="x")])
        with pytest.raises(ProviderError, match="bad key") as info:
            await provider.complete(request)
        assert info.value.status == 502
        await provider.aclose()


def test_missing_key_env_var_fails_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_KEY", raising=False)
    config = ProviderConfig(
        name="a",
        kind="anthropic",
        base_url="http://127.0.0.1:9",
        api_key_env="NOPE_KEY",
        models=(MODEL,),
    )
    with pytest.raises(ConfigError, match="NOPE_KEY"):
        AnthropicProvider.from_config(config)
