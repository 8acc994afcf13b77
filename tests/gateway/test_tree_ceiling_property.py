"""A delegation tree's one ceiling as a property, over real HTTP through the gateway.

The root conversation's budget is the ceiling of the whole tree. Whatever the children do at
once (random shares of the budget, random request sizes and costs, streams the upstream cuts or
stalls, streams the gateway cuts at the ceiling, answers with and without usage, upstream
errors), the runs of the tree together spend at most the root's ceiling plus the largest
reservation of one admitted request: one request in total, not one per run. The ledger agrees
with the gateway to the cent.

The runs are set up the way ``service/delegation.py`` sets them up: each child's ceiling is its
share of the parent's remainder, and the parent's own ceiling is lowered by the carved amount.
"""

from __future__ import annotations

import secrets
from decimal import ROUND_DOWN, Decimal
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from synthorg.domain import ConversationRecord
from synthorg.domain.binding import RunBinding

from .batch import Spec, body, drive, specs, within_one_reservation
from .harness import FAKE_MODEL, FakeHarness, tree_conversation

_CENT = Decimal("0.000001")


async def _open(
    fake: FakeHarness, record: ConversationRecord, ceiling: Decimal | None = None
) -> tuple[str, str]:
    """Save the conversation, open a run of it at its budget: (execution id, bearer).

    With ``ceiling``: a further run of the saved conversation, at that ceiling."""
    if ceiling is None:
        await fake.store.create_conversation(record)
    binding = RunBinding(
        execution_id=f"exec-{secrets.token_hex(6)}",
        agent_id="agent-1",
        task_id=record.task.id,
        project_id="proj",
        conversation_id=record.id,
        provider="fake",
        model_id=FAKE_MODEL,
        cost_ceiling=record.budget_usd if ceiling is None else ceiling,
    )
    return binding.execution_id, await fake.gateway.issue(binding)


_DEAR = Spec(
    prompt=2000,
    tools=0,
    cap=1,
    n=None,
    stream=False,
    out_chars=4,
    usage=False,
    ending="done",
    error=None,
)
"""Fits a child's share by its least cost, is billed its whole (much larger) reservation."""


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ceiling=st.decimals(min_value=Decimal("0.01"), max_value=Decimal(10), places=2),
    shares=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    batches=st.lists(st.lists(specs(), min_size=1, max_size=5), min_size=5, max_size=5),
)
@example(ceiling=Decimal("1.00"), shares=[3, 3, 3], batches=[[_DEAR]] * 5)
async def test_a_delegation_tree_stays_within_one_request_of_its_roots_ceiling(
    fake: FakeHarness, ceiling: Decimal, shares: list[int], batches: list[list[Spec]]
) -> None:
    # Carve as delegation does: shares of the parent's remainder (tenths, at most the whole).
    total = max(10, sum(shares))
    carves = [(ceiling * share / total).quantize(_CENT, rounding=ROUND_DOWN) for share in shares]
    root = tree_conversation(ceiling)
    parent_exec, parent_token = await _open(fake, root)
    runs = [(parent_exec, parent_token)]
    for carve in carves:
        runs.append(await _open(fake, tree_conversation(carve, root.id)))
    await fake.gateway.set_ceiling(parent_exec, ceiling - sum(carves, Decimal(0)))

    by_nonce: dict[str, Spec] = {}
    sends: list[tuple[str, dict[str, Any]]] = []
    for (_, token), batch in zip(runs, batches, strict=False):
        for spec in batch:
            nonce = f"n{secrets.token_hex(6)}"
            by_nonce[nonce] = spec
            sends.append((token, body(nonce, spec)))
    usages, tickets = await drive(fake, by_nonce, sends, [e for e, _ in runs], 180)

    # The runs of the tree together: one request over at most, not one per run.
    spent = sum((u.cost_usd for u in usages), Decimal(0))
    within_one_reservation(spent, ceiling, tickets)
    # The ledger (what a restarted gateway or another process reads) agrees to the cent.
    budget = await fake.store.tree_budget(root.id)
    assert budget is not None and budget.root_id == root.id and budget.ceiling == ceiling
    assert budget.spent == spent
