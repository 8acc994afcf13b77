"""Store contract for delegation: lineage columns, children, a conversation's ledger rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from store_helpers import message, record, uid

from synthorg.errors import NotFoundError
from synthorg.store import Store


async def test_children_are_listed_by_parent_in_creation_order(store: Store) -> None:
    root = record()
    await store.create_conversation(root)
    start = datetime.now(UTC)
    first = record(parent_id=root.id, root_id=root.id, created_at=start)
    second = record(created_at=start + timedelta(seconds=1))
    await store.create_conversation(second)
    await store.create_conversation(first)
    # Lineage set after creation (as delegation does) is kept in the column too.
    await store.save_conversation(
        second.model_copy(update={"parent_id": root.id, "root_id": root.id})
    )
    grandchild = record(parent_id=first.id, root_id=root.id)
    await store.create_conversation(grandchild)
    children = await store.list_children(root.id)
    assert [c.id for c in children] == [first.id, second.id]
    assert all(c.parent_id == root.id and c.root_id == root.id for c in children)
    assert [c.id for c in await store.list_children(first.id)] == [grandchild.id]
    assert await store.list_children(grandchild.id) == []


async def test_ceiling_changes_and_a_conversations_rows(store: Store) -> None:
    conversation = uid()
    ids = [uid("e"), uid("e")]
    for execution_id in ids:
        await store.open_execution(
            execution_id=execution_id,
            conversation_id=conversation,
            model="m",
            provider="p",
            cost_ceiling_usd=Decimal("1.5"),
        )
        await store.record_usage(execution_id, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.25"))
    row = await store.set_cost_ceiling(ids[0], Decimal("0.75"))
    assert row.cost_ceiling_usd == Decimal("0.75")
    assert (await store.get_execution(ids[0])).cost_ceiling_usd == Decimal("0.75")
    rows = await store.executions_of(conversation)
    assert sorted(r.execution_id for r in rows) == sorted(ids)
    assert sum(r.cost_usd for r in rows) == Decimal("0.5")
    assert await store.executions_of(uid()) == []


async def _spend(store: Store, costs: dict[str, list[str]]) -> None:
    """One finished run per cost, of each conversation."""
    for conversation_id, runs in costs.items():
        for cost in runs:
            execution_id = uid("e")
            await store.open_execution(
                execution_id=execution_id,
                conversation_id=conversation_id,
                model="m",
                provider="p",
                cost_ceiling_usd=None,
            )
            await store.record_usage(
                execution_id, tokens_in=1, tokens_out=1, cost_usd=Decimal(cost)
            )


async def _spent(store: Store, conversation_id: str) -> Decimal:
    return sum((e.cost_usd for e in await store.executions_of(conversation_id)), Decimal(0))


async def test_deleting_keeps_the_ledger_and_a_root_takes_its_tree(store: Store) -> None:
    root = record(budget_usd=Decimal(1))
    child = record(parent_id=root.id, root_id=root.id)
    grandchild = record(parent_id=child.id, root_id=root.id)
    lone = record(parent_id=root.id, root_id=root.id)
    stranger = record()
    tree = (root, child, grandchild, lone)
    for conversation in (*tree, stranger):
        await store.create_conversation(conversation)
        await store.append(conversation.id, message(1))
    costs = {c.id: ["0.5", "0.25"] for c in (*tree, stranger)}
    await _spend(store, costs)
    # A child goes alone (its own delegations are not a tree of their own)...
    await store.delete_conversation(lone.id)
    assert [c.id for c in await store.list_children(root.id)] == [child.id]
    # ... and a root goes with every conversation under it.
    await store.delete_conversation(root.id)
    for gone in tree:
        with pytest.raises(NotFoundError):
            await store.get_conversation(gone.id)
        assert await store.history(gone.id) == []
    assert (await store.get_conversation(stranger.id)).id == stranger.id
    assert len(await store.history(stranger.id)) == 1
    # Every cent spent is still in the ledger, under its run's conversation id.
    for conversation_id in costs:
        assert await _spent(store, conversation_id) == Decimal("0.75")
    with pytest.raises(NotFoundError):
        await store.delete_conversation(root.id)


async def test_a_trees_budget_is_its_roots_against_every_run_under_it(store: Store) -> None:
    root = record(budget_usd=Decimal("2.5"))
    child = record(parent_id=root.id, root_id=root.id, budget_usd=Decimal("1"))
    grandchild = record(parent_id=child.id, root_id=root.id, budget_usd=Decimal("0.5"))
    stranger = record(budget_usd=Decimal("9"))
    for conversation in (root, child, grandchild, stranger):
        await store.create_conversation(conversation)
    costs = {root.id: ["0.1", "0.2"], child.id: ["0.25"], grandchild.id: ["0.125"]}
    costs[stranger.id] = ["7"]
    await _spend(store, costs)  # several runs each: a resume's spend counts
    for member in (root, child, grandchild):
        budget = await store.tree_budget(member.id)
        assert budget is not None
        assert (budget.root_id, budget.ceiling, budget.spent) == (
            root.id,
            Decimal("2.5"),
            Decimal("0.675"),
        )
    alone = await store.tree_budget(stranger.id)
    assert alone is not None and (alone.root_id, alone.spent) == (stranger.id, Decimal(7))
    unbounded = record()
    await store.create_conversation(unbounded)
    assert await store.tree_budget(unbounded.id) is None
    assert await store.tree_budget(uid()) is None
