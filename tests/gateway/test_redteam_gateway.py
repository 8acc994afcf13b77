"""Red team, gateway round two: bodies the official client never sends, as a bearer holder.

Raw JSON with NaN/Infinity, huge floats, lone surrogates and unicode-heavy prompts: each must be
refused with a 4xx before the upstream sees it, or admitted and billed within the ceiling; never
a 500 that leaves a reservation unsettled.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from .harness import FAKE_MODEL, FAKE_PRICE, FakeHarness


def _body(**extra: str) -> bytes:
    """A request body with raw JSON fragments spliced in (what json.dumps would not write)."""
    fields = {
        "model": json.dumps(FAKE_MODEL),
        "messages": '[{"role": "user", "content": "hi"}]',
        **extra,
    }
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}").encode()


@pytest.mark.parametrize(
    "extra",
    [
        {"max_tokens": "NaN"},
        {"max_tokens": "Infinity"},
        {"max_tokens": "-Infinity"},
        {"max_tokens": "1e400"},
        {"max_completion_tokens": "NaN"},
        {"n": "NaN"},
        {"n": "Infinity"},
        {"n": "1e400"},
        {"messages": '[{"role": "user", "content": "\\ud800 lone surrogate"}]'},
        {"tools": '[{"type": "function", "function": {"name": "\\udfff"}}]'},
    ],
)
async def test_non_finite_and_unencodable_bodies_are_refused(
    fake: FakeHarness, extra: dict[str, str]
) -> None:
    binding, token = await fake.run(Decimal(1))
    async with fake.http(token) as http:
        response = await http.post(
            "/chat/completions",
            content=_body(**extra),
            headers={"content-type": "application/json"},
        )
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert fake.upstream.records == []
    usage = await fake.gateway.usage(binding.execution_id)
    assert usage.cost_usd == 0


async def test_unicode_heavy_prompt_is_reserved_by_bytes(fake: FakeHarness) -> None:
    """4-byte characters: an estimate by characters would reserve a quarter of the bill."""
    prompt = "\U0001f600" * 20_000  # 80 KB of UTF-8, 20k characters
    ceiling = Decimal("0.05")  # $1000/Mtok: 80 KB is ~20k tokens at the lower bound = $20
    binding, token = await fake.run(ceiling)
    async with fake.http(token) as http:
        payload = {
            "model": FAKE_MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 16,
        }
        response = await http.post("/chat/completions", json=payload)
    assert response.status_code == 402, response.text
    assert fake.upstream.records == []
    usage = await fake.gateway.usage(binding.execution_id)
    assert usage.cost_usd <= ceiling
    assert FAKE_PRICE is not None
