"""Scripted models, the script registry, the scripted provider, and the gateway config."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from synthorg.errors import ConfigError
from synthorg.gateway.config import DEMO_MODEL, GatewayConfig, ProviderConfig, load_gateway_config
from synthorg.gateway.providers import build_providers
from synthorg.gateway.providers.base import ProviderError
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import (
    ScriptedSequence,
    ScriptedTurn,
    ScriptExhausted,
    register_script,
    registered_scripts,
    resolve_script,
)
from synthorg.gateway.wire import ChatMessage, ChatRequest

SEQUENCE = ScriptedSequence("module-seq", [ScriptedTurn.say("from a module")])


def _request(*contents: str, model: str = "m") -> ChatRequest:
    messages = []
    for i, content in enumerate(contents):
        messages.append(ChatMessage(role="user" if i % 2 == 0 else "assistant", content=content))
    return ChatRequest(model=model, messages=messages)


def test_default_config_is_valid_and_prices_the_demo() -> None:
    config = GatewayConfig()
    assert config.serves("scripted", DEMO_MODEL)
    assert config.price(DEMO_MODEL).cost(1000, 1000) > 0
    assert config.price("unknown").cost(10**6, 10**6) == 0
    providers = build_providers(config)
    assert isinstance(providers["scripted"], ScriptedProvider)


def test_config_file_with_a_gateway_section(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[gateway]\ntoken_ttl_s = 60\n[[gateway.providers]]\nname = "s"\nkind = "scripted"\n'
        'models = ["a", "b"]\nscript = "echo"\n[gateway.providers.scripts]\nb = "demo"\n'
        "[gateway.prices.a]\ninput_per_mtok_usd = 1.5\noutput_per_mtok_usd = 2\n"
    )
    config = load_gateway_config(path)
    assert config.token_ttl_s == 60 and config.prices["a"].input_per_mtok_usd == Decimal("1.5")
    path.write_text("[gateway]\nnonsense = 1\n")
    with pytest.raises(ConfigError, match="invalid"):
        load_gateway_config(path)
    with pytest.raises(ValueError, match="base_url"):
        ProviderConfig(name="x", kind="openai", models=("m",))
    with pytest.raises(ValueError, match="unique"):
        GatewayConfig(providers=[ProviderConfig(name="x", kind="scripted", script="echo")] * 2)


def test_sequence_by_history_and_exhaustion() -> None:
    seq = ScriptedSequence("three", [ScriptedTurn.say("a"), ScriptedTurn.say("b")])
    assert seq(_request("u").messages, None).text == "a"
    assert seq(_request("u").messages, None).text == "a", "same history, same turn"
    assert seq(_request("u", "a", "u2").messages, None).text == "b"
    with pytest.raises(ScriptExhausted, match="'three' ran out of turns"):
        seq(_request("u", "a", "u", "b", "u").messages, None)


def test_sequence_by_counter() -> None:
    seq = ScriptedSequence("c", [ScriptedTurn.say("1"), ScriptedTurn.say("2")], by_history=False)
    assert [seq([], None).text, seq([], None).text] == ["1", "2"]
    with pytest.raises(ScriptExhausted):
        seq([], None)


def test_registry_and_import_paths() -> None:
    register_script("test-registry-x", lambda: ScriptedSequence("x", [ScriptedTurn.say("x")]))
    assert "test-registry-x" in registered_scripts()
    with pytest.raises(ConfigError, match="already registered"):
        register_script("test-registry-x", lambda: SEQUENCE)
    assert resolve_script("test-registry-x")([], None).text == "x"
    imported = resolve_script("tests.gateway.test_scripted_and_config:SEQUENCE")
    assert imported([], None).text == "from a module"
    with pytest.raises(ConfigError, match="unknown script"):
        resolve_script("no-such-script")
    with pytest.raises(ConfigError, match="cannot import"):
        resolve_script("no.such.module:thing")


async def test_provider_tokens_latency_and_unknown_model() -> None:
    provider = ScriptedProvider(
        {
            "m": ScriptedSequence(
                "s", [ScriptedTurn.say("12345678"), ScriptedTurn("x", tokens_in=7, tokens_out=9)]
            )
        },
        latency_s=0.01,
    )
    first = await provider.complete(_request("abcd" * 10))
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (10, 2)
    second = await provider.complete(_request("u", "12345678", "v"))
    assert second.usage is not None
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (7, 9)
    with pytest.raises(ProviderError, match="no script for model 'other'"):
        await provider.complete(_request("u", model="other"))


async def test_stream_reassembles_to_the_completion() -> None:
    turn = ScriptedTurn(
        text="some longer text that spans several chunks",
        tool_calls=(ScriptedTurn.call("edit", path="a.py", content="x" * 50).tool_calls[0],),
    )
    provider = ScriptedProvider({"m": lambda messages, tools: turn})
    full = await provider.complete(_request("go"))
    chunks = [c async for c in provider.stream(_request("go"))]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    args = "".join(
        (call.function.arguments or "") if call.function else ""
        for c in chunks
        if c.choices
        for call in c.choices[0].delta.tool_calls or ()
    )
    assert text == full.choices[0].message.content
    calls = full.choices[0].message.tool_calls
    assert calls is not None and args == calls[0].function.arguments
    assert chunks[-1].usage == full.usage
