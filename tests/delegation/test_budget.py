"""Money: children's ceilings carved from the parent's remaining budget, enforced by the gateway,
and every figure the parent is told matching the ledger."""

from __future__ import annotations

import re
from decimal import ROUND_DOWN, Decimal
from pathlib import Path

import pytest

from synthorg.domain import TerminationReason
from synthorg.service.delegation import ledger_spend
from synthorg.service.options import RunOptions
from tests import support

from .conftest import Booter
from .scripts import delegate, edit
from .test_merge import _delegate_observation

pytestmark = pytest.mark.bwrap

CEILING = Decimal("0.05")


async def test_carve_out_enforcement_and_roll_up_match_the_ledger(
    booted: Booter, repo: Path
) -> None:
    prompt = delegate(
        {"prompt": edit("notes.txt", "bravo\n", "BRAVO\n"), "budget_share": 0.5},
        {"prompt": "SPIN", "budget_share": 0.05},
        then_spin=True,
    )
    async with booted() as components:
        service, store = components.service, components.store
        parent = await service.create(
            support.make_task(repo, prompt), RunOptions(budget_usd=CEILING, max_turns=500)
        )
        result = await service.run(parent.id)
        # The parent spun after delegating until the gateway refused it at its lowered ceiling.
        assert result.termination_reason is TerminationReason.BUDGET_EXHAUSTED, result.error
        editor, spinner = await store.list_children(parent.id)

        # Carved at spawn from what the parent had left after its first model call.
        remaining = CEILING - result.turns[0].cost_usd
        assert editor.budget_usd == (remaining * Decimal("0.5")).quantize(
            Decimal("0.000001"), rounding=ROUND_DOWN
        )
        assert spinner.budget_usd == (remaining * Decimal("0.05")).quantize(
            Decimal("0.000001"), rounding=ROUND_DOWN
        )

        # The spinning child hit its own ceiling (the gateway's 402) and says so to the parent.
        assert spinner.termination_reason is TerminationReason.BUDGET_EXHAUSTED
        observation = (await _delegate_observation(components, parent.id)).content
        assert f"{spinner.id} [react]: budget_exhausted" in observation
        assert f"{editor.id} [react]: completed" in observation and "merge: clean" in observation

        # Ledger: every figure is the gateway's. Children's own records agree with it.
        spent = {c.id: await ledger_spend(store, c.id) for c in (editor, spinner)}
        for child in (editor, spinner):
            final = await store.get_conversation(child.id)
            assert final.usage.cost_usd == spent[child.id]
            assert (
                f"{child.id} [react]" in observation and f"spent ${spent[child.id]}" in observation
            )
        children_total = sum(spent.values(), Decimal(0))
        reported = re.search(r"spend: children \$([0-9.]+) in total", observation)
        assert reported is not None and Decimal(reported.group(1)) == children_total
        # The parent's result: its own spend in usage, its children's beside it.
        assert result.delegated_cost_usd == children_total

        # The parent's ceiling at the gateway is its own minus what the children spent...
        parent_row = await components.gateway.usage(result.execution_id)
        assert parent_row.cost_ceiling_usd == CEILING - children_total
        parent_spent = await ledger_spend(store, parent.id)
        assert parent_spent == result.usage.cost_usd
        # ...so parent plus children stay within the parent's ceiling, give or take the one
        # request that crosses it (the gateway's invariant).
        largest = max(t.cost_usd for t in result.turns)
        assert parent_spent + children_total <= CEILING + largest
        # It was stopped by the lowered ceiling, not by its own original one.
        assert result.error is not None
        assert f"cost ceiling of ${CEILING - children_total}" in result.error
