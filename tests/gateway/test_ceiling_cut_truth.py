"""A stream cut at the ceiling says what is true (issue 30, finding 7).

An upstream that streams far past the request's ``max_tokens`` crosses the ceiling on output
the cap should have prevented. The cut used to say "...the run killed" while the bill was
clamped to the cap, the ledger row stayed active and the next requests were answered 200.
Now output certainly past the cap is billed as received, which breaks the request's bound: the
run is killed (``upstream_overreport``), so the message is true and the next request refused.
"""

from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from synthorg.store.protocol import ExecutionStatus

from .fake_upstream import Reply
from .harness import FAKE_MODEL, FakeHarness


@pytest.mark.parametrize("usage", [True, False])
async def test_a_cut_that_says_killed_kills(fake: FakeHarness, usage: bool) -> None:
    fake.upstream.plan = lambda body: Reply(text="word " * 4000, piece=256, usage=usage)
    binding, token = await fake.run(Decimal("0.5"))  # a $0.116 reservation: far below it
    async with fake.client(token) as client:
        stream = await client.chat.completions.create(
            model=FAKE_MODEL,
            messages=[{"role": "user", "content": "go"}],
            max_tokens=16,
            stream=True,
        )
        with pytest.raises(openai.APIError) as cut:
            async for _ in stream:
                pass
        assert "killed" in str(cut.value), cut.value
        await fake.gateway.flush(binding.execution_id)
        row = await fake.store.get_execution(binding.execution_id)
        assert row.status == ExecutionStatus.KILLED, row
        for _ in range(3):
            with pytest.raises(openai.APIStatusError) as refused:
                await client.chat.completions.create(
                    model=FAKE_MODEL, messages=[{"role": "user", "content": "again"}], max_tokens=16
                )
            assert refused.value.status_code in (402, 403)
    assert len(fake.upstream.records) == 1


async def test_output_past_the_cap_kills_the_run_far_below_its_ceiling(fake: FakeHarness) -> None:
    """The same upstream, no usage, a $100 ceiling: the answer breaks its bound, so the run
    is killed as an over-report. Before: billed the cap's worth and the run went on."""
    fake.upstream.plan = lambda body: Reply(text="word " * 4000, piece=256, usage=False)
    binding, token = await fake.run(Decimal(100))
    async with fake.client(token) as client:
        stream = await client.chat.completions.create(
            model=FAKE_MODEL,
            messages=[{"role": "user", "content": "go"}],
            max_tokens=16,
            stream=True,
        )
        async for _ in stream:
            pass
        await fake.gateway.flush(binding.execution_id)
        row = await fake.store.get_execution(binding.execution_id)
        assert row.status == ExecutionStatus.KILLED, row
        assert row.status_reason.startswith("upstream_overreport"), row.status_reason
        with pytest.raises(openai.APIStatusError):
            await client.chat.completions.create(
                model=FAKE_MODEL, messages=[{"role": "user", "content": "again"}], max_tokens=16
            )
