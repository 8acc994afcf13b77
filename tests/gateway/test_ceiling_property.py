"""The ceiling invariant as a property, over real HTTP through the gateway to a loopback upstream.

Any interleaving of concurrent requests of one run (random prompt sizes, tool schemas, output
caps, n, streaming or not, streams the upstream cuts or stalls, answers with and without usage,
upstream errors) ends with:

- spend <= ceiling + the largest reservation of one admitted request;
- every admitted request settled exactly once, and the ledger equal to the sum of what the
  upstream reported, or, where it reported nothing, the gateway's conservative estimate.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from decimal import Decimal

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import Usage

from .batch import Spec, body, drive, specs, within_one_reservation
from .fake_upstream import Record
from .harness import FAKE_PRICE, FakeHarness

_EMPTY = Spec(
    prompt=366,
    tools=1,
    cap=10,
    n=None,
    stream=False,
    out_chars=0,
    usage=False,
    ending="done",
    error=None,
)
"""An empty answer whose bill (its upper-bound prompt) crosses a $1 ceiling: it kills the run
without being cut. In a random batch, whether such a request is the one that crosses depends
on the order the gateway admits the batch in (the property failed on a loaded machine only)."""


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ceiling=st.decimals(min_value=Decimal("0.01"), max_value=Decimal(30), places=2),
    batch=st.lists(specs(), min_size=1, max_size=12),
)
@example(ceiling=Decimal("1.00"), batch=[_EMPTY])
@example(ceiling=Decimal("1.00"), batch=[replace(_EMPTY, stream=True)])
async def test_spend_stays_within_one_reservation_of_the_ceiling(
    fake: FakeHarness, ceiling: Decimal, batch: list[Spec]
) -> None:
    by_nonce = {f"n{secrets.token_hex(6)}": spec for spec in batch}
    binding, token = await fake.run(ceiling)
    sends = [(token, body(nonce, spec)) for nonce, spec in by_nonce.items()]
    (usage,), tickets = await drive(fake, by_nonce, sends, [binding.execution_id], 120)

    assert usage.requests == len(tickets)
    within_one_reservation(usage.cost_usd, ceiling, tickets)
    records = {r.body["messages"][0]["content"].split(" ", 1)[0]: r for r in fake.upstream.records}
    for ticket in tickets:
        nonce = str(ticket.request.messages[0].content).split(" ", 1)[0]
        assert ticket.cost == _expected(ticket, by_nonce[nonce], records[nonce]), ticket


def _expected(ticket: Ticket, spec: Spec, record: Record) -> Decimal:
    """What the request must have been billed, from what the upstream did."""
    bounds = ticket.bounds
    if spec.error:
        assert ticket.billed_as == "refused"
        return Decimal(0)  # refused by the upstream before generating: not billed
    if ticket.billed_as == "answered" and (
        spec.usage or not record.finished or ticket.out_bytes < spec.out_chars
    ):
        # Cut by the gateway at the ceiling: the upper-bound prompt and every byte received
        # (the upstream may have finished writing what the gateway never read: the race
        # hypothesis found; what was never received is covered by the one-request margin).
        # Known by what was relayed, not by ``killed``, which marks whichever request's bill
        # crossed the ceiling: a whole answer too (an empty one failed ``0 < out_bytes``).
        # A whole answer without usage is billed the same, cut after its last byte or not.
        assert spec.stream and ticket.killed and 0 < ticket.out_bytes <= spec.out_chars
        return _cost(bounds.unreported(ticket.out_bytes))
    if not record.finished:  # the upstream cut or stalled the stream
        assert ticket.billed_as == "incomplete"
        return _cost(bounds.reservation())
    if spec.usage:
        assert ticket.billed_as == "reported" and record.reported is not None
        return FAKE_PRICE.cost(*record.reported)  # the upstream's own figures
    assert ticket.billed_as == "answered"
    return _cost(bounds.unreported(spec.out_chars))


def _cost(usage: Usage) -> Decimal:
    return FAKE_PRICE.cost(usage.prompt_tokens, usage.completion_tokens)
