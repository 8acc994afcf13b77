"""A delegation tree's one budget, read the same way from either backend.

The root conversation's ``budget_usd`` is the ceiling of everything under it; the spend is the
sum of the ledger rows of every run of the root and of every conversation whose ``root_id`` is
the root (children carry it from spawn). Each backend supplies only that sum's rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from synthorg.domain import ConversationRecord
from synthorg.domain.money import money, total
from synthorg.errors import NotFoundError
from synthorg.store.protocol import TreeBudget

TREE_COSTS_SQL = (
    "SELECT e.cost_usd FROM executions e JOIN conversations c ON c.id = e.conversation_id"
    " WHERE c.id = {mark} OR c.root_id = {mark}"
)
"""The cost of every run in the tree of root ``{mark}`` (bound twice)."""

TREE_MEMBERS_SQL = "SELECT id FROM conversations WHERE id = {mark} OR root_id = {mark}"
"""The conversation ``{mark}`` and, when it is a root, every conversation of its tree (bound twice).

Deleting a conversation deletes these rows together and keeps their ledger rows: the spend stays
in the ledger under each run's conversation id, and no child is left to run outside a tree."""

DELETE_TREE_SQL = "DELETE FROM conversations WHERE id = {mark} OR root_id = {mark}"
"""Deletes the rows of ``TREE_MEMBERS_SQL``."""


async def read_tree_budget(
    conversation_id: str,
    get_conversation: Callable[[str], Awaitable[ConversationRecord]],
    tree_costs: Callable[[str], Awaitable[list[object]]],
) -> TreeBudget | None:
    """The budget of ``conversation_id``'s tree; None when unknown or unbounded."""
    try:
        record = await get_conversation(conversation_id)
        root_id = record.root_id or record.id
        root = record if root_id == record.id else await get_conversation(root_id)
    except NotFoundError:
        return None
    if root.budget_usd is None:
        return None
    costs = await tree_costs(root_id)
    spent = total(money(cost) for cost in costs)
    return TreeBudget(root_id=root_id, ceiling=root.budget_usd, spent=spent)
