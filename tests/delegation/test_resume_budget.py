"""Budgets survive a SIGKILL of the host: resumed runs continue from what was already spent.

A parent with a ceiling delegates to two children that spend until their budgets stop them. The
host is SIGKILLed once both children have spent a quarter of their share (what it had in flight
then holds its reservation in the ledger, billed in full: the rest leaves room to go on); a new
host resumes the parent (which resumes the children). The tree as a whole, and each child, end
within their ceilings by at most one request's reservation over all runs before and after the
kill, and every roll-up (the parent's result, its observation, the tree view) equals the ledger
to the cent.
"""

from __future__ import annotations

import asyncio
import re
from decimal import ROUND_DOWN, Decimal
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, ObservationEvent, TerminationReason
from synthorg.gateway.ticket import Ticket
from synthorg.service.delegation import ledger_spend
from synthorg.service.tree import committed_spend, run_tree
from tests.delegation.conftest import Booter, crashing_host
from tests.delegation.scripts import delegate
from tests.delegation.test_control import _sandboxes_alive

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

CEILING = Decimal("0.2")
SHARE = Decimal("0.45")


async def test_sigkill_then_resume_continues_every_budget_of_the_tree(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    prompt = delegate(
        {"prompt": "SPIN", "budget_share": float(SHARE)},
        {"prompt": "SPIN", "budget_share": float(SHARE)},
        then_spin=True,
    )
    async with (
        crashing_host(tmp_path, repo, prompt, CEILING) as (parent_id, kill),
        booted() as components,  # the same data dir: the same store
    ):
        store = components.store

        async def children_started_spending() -> dict[str, Decimal]:
            while True:
                children = await store.list_children(parent_id)
                spent = {c.id: await ledger_spend(store, c.id) for c in children}
                carves = [c.budget_usd for c in children]
                if len(children) == 2 and all(
                    carve is not None and spent[c.id] * 4 >= carve
                    for c, carve in zip(children, carves, strict=True)
                ):
                    return spent
                await asyncio.sleep(0.05)  # polled under the deadline below

        before_kill = await asyncio.wait_for(children_started_spending(), 300)
        await kill()

        async def dead_holds_billed() -> None:
            # The killed host's holds (2 s leases) are billed in full once expired; reading
            # what is committed bills them. Then every roll-up made later sees the same spend.
            while True:
                tree = await run_tree(store, parent_id)
                if await committed_spend(store, parent_id, tree) == tree.tree_cost_usd:
                    return  # no hold left in the tree
                await asyncio.sleep(0.2)  # polled under the deadline below

        await asyncio.wait_for(dead_holds_billed(), 120)

    async with booted() as components:
        store, service = components.store, components.service
        tickets: list[Ticket] = []
        components.gateway.on_settle(tickets.append)
        children = await store.list_children(parent_id)
        # Still the dead owner's, or already swept by this boot (issue 29's sweep): not ended.
        assert all(
            c.status in (ConversationStatus.RUNNING, ConversationStatus.INTERRUPTED)
            for c in children
        )
        assert len(children) == 2
        result = await service.run(parent_id)  # the dead owner is reconciled, then resumed
        assert result.resumed
        assert result.termination_reason is TerminationReason.BUDGET_EXHAUSTED, result.error
        assert tickets, "the resumed runs made model calls"
        # A request the killed host had in flight (or answered and not yet written) holds its
        # reservation in the ledger and is billed it in full: the bound is one reservation.
        one_request = max(t.reserved for t in tickets)

        children = await store.list_children(parent_id)
        spent = {c.id: await ledger_spend(store, c.id) for c in children}
        remaining = CEILING - (await store.executions_of(parent_id))[0].cost_usd
        for child in children:
            assert child.runs == 2  # the run the kill interrupted, and its resumption
            assert child.termination_reason is TerminationReason.BUDGET_EXHAUSTED
            # Its carve was made once, at the first spawn, and both runs drew on it.
            assert child.budget_usd == (remaining * SHARE).quantize(
                Decimal("0.000001"), rounding=ROUND_DOWN
            )
            assert spent[child.id] > before_kill[child.id]
            assert spent[child.id] <= child.budget_usd + one_request, (
                f"child {child.id} spent ${spent[child.id]} of its ${child.budget_usd}"
            )
            # Its record's totals are the sum over both runs, as the ledger has them.
            assert child.usage.cost_usd == spent[child.id]

        # The whole tree, over every run before and after the kill: one request over at most.
        parent_spent = await ledger_spend(store, parent_id)
        tree_spent = parent_spent + sum(spent.values(), Decimal(0))
        assert tree_spent <= CEILING + one_request, (
            f"the tree spent ${tree_spent} of its ${CEILING} ceiling"
        )
        budget = await store.tree_budget(parent_id)
        assert budget is not None and budget.spent == tree_spent

        # Roll-ups equal the ledger to the cent: the result, the observation, the tree view.
        children_total = sum(spent.values(), Decimal(0))
        assert result.delegated_cost_usd == children_total
        observations = [
            e.event
            for e in await store.history(parent_id, kinds=frozenset({"observation"}), limit=1000)
            if isinstance(e.event, ObservationEvent) and "spend: children" in e.event.content
        ]
        reported = re.search(r"spend: children \$([0-9.]+) in total", observations[-1].content)
        assert reported is not None and Decimal(reported.group(1)) == children_total
        tree = await run_tree(store, parent_id)
        assert tree.cost_usd == parent_spent and tree.tree_cost_usd == tree_spent
        assert {node.id: node.cost_usd for node in tree.children} == spent
        parent = await store.get_conversation(parent_id)
        assert parent.usage.cost_usd == parent_spent
    assert not _sandboxes_alive()
