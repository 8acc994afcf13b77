"""Issue 30 findings 6 and 8: what the gateway forwards, and what it refuses on the way.

Through a real gateway to the recording FakeUpstream: the routing fields of OpenRouter (the
router the README names; OpenAI, vLLM and Ollama have none) are refused, fields the gateway
does not know are dropped, the known ones are forwarded, and ``stream`` must be a boolean.
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import FAKE_MODEL, FakeHarness

MESSAGES = [{"role": "user", "content": "hi"}]


async def _send(fake: FakeHarness, **extra: Any) -> tuple[int, dict[str, Any]]:
    _, token = await fake.run()
    async with fake.http(token) as http:
        body = {"model": FAKE_MODEL, "messages": MESSAGES, **extra}
        response = await http.post("/chat/completions", json=body)
    return response.status_code, response.json()


@pytest.mark.parametrize(
    "routing",
    [
        {"models": [FAKE_MODEL, "openai/gpt-5", "anthropic/claude-opus-4"]},
        {"route": "fallback"},
        {"provider": {"order": ["OpenAI", "Together"], "allow_fallbacks": True}},
    ],
    ids=["models", "route", "provider"],
)
async def test_routing_fields_are_refused(fake: FakeHarness, routing: dict[str, Any]) -> None:
    status, body = await _send(fake, **routing)
    assert status == 400, body
    assert next(iter(routing)) in body["error"]["message"]
    assert fake.upstream.records == [], "nothing reached the upstream"


async def test_only_known_fields_are_forwarded(fake: FakeHarness) -> None:
    status, _ = await _send(
        fake,
        seed=7,
        reasoning_effort="low",
        top_p=0.5,
        transforms=["middle-out"],
        service_tier="priority",
        web_search_options={},
        plugins=[{"id": "web"}],
    )
    assert status == 200
    [record] = fake.upstream.records
    sent = record.body
    assert {"seed": 7, "reasoning_effort": "low", "top_p": 0.5}.items() <= sent.items()
    dropped = {"transforms", "service_tier", "web_search_options", "plugins"}
    assert not dropped & sent.keys(), sorted(dropped & sent.keys())


@pytest.mark.parametrize("value", ["yes", "true", 1, "1"])
async def test_stream_must_be_a_boolean(fake: FakeHarness, value: Any) -> None:
    status, body = await _send(fake, stream=value)
    assert status == 400, body
    assert "stream" in body["error"]["message"]
