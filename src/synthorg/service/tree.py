"""The tree of runs a conversation delegated: statuses and spend, from the store and the ledger."""

from __future__ import annotations

from decimal import Decimal
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from synthorg.domain import ConversationRecord, ConversationStatus, TerminationReason, TokenUsage
from synthorg.domain.money import total
from synthorg.store.protocol import ExecutionUsage, SharedBudgetLedger

MAX_NODES = 1000
"""Largest tree returned (depth and fan-out are capped by config; this bounds a bad store)."""


@runtime_checkable
class TreeStore(Protocol):
    """What the tree reads: conversations, their children, and the ledger (one backend)."""

    async def get_conversation(self, conversation_id: str) -> ConversationRecord: ...

    async def list_children(self, parent_id: str) -> list[ConversationRecord]: ...

    async def executions_of(self, conversation_id: str) -> list[ExecutionUsage]: ...


class RunNode(BaseModel):
    """One conversation of a delegation tree, with its children."""

    id: str = Field(description="Conversation id.")
    parent_id: str | None = Field(description="The conversation that delegated it.")
    status: ConversationStatus = Field(description="Lifecycle status.")
    loop_type: str = Field(description="Execution loop.")
    termination_reason: TerminationReason | None = Field(description="Why its last run ended.")
    budget_usd: Decimal | None = Field(description="Its cost ceiling (a child's was carved).")
    cost_usd: Decimal = Field(description="Its own spend, from the gateway's ledger.")
    tree_cost_usd: Decimal = Field(description="Its spend plus all its descendants'.")
    commit_sha: str | None = Field(description="Its latest landed commit.")
    title: str = Field(description="First line of its task.")
    children: list[RunNode] = Field(description="Conversations it delegated, oldest first.")


_FROM_RECORD = set(RunNode.model_fields) & set(ConversationRecord.model_fields)
"""The node's fields that are the conversation's own, copied by name."""


async def ledger_usage(store: TreeStore, conversation_id: str) -> TokenUsage:
    """The conversation's totals over all its runs, from the gateway's ledger rows."""
    total = TokenUsage()
    for row in await store.executions_of(conversation_id):
        total += TokenUsage(
            tokens_in=row.tokens_in, tokens_out=row.tokens_out, cost_usd=row.cost_usd
        )
    return total


async def ledger_spend(store: TreeStore, conversation_id: str) -> Decimal:
    """The conversation's spend over all its runs, from the gateway's ledger rows."""
    return (await ledger_usage(store, conversation_id)).cost_usd


async def run_tree(store: TreeStore, conversation_id: str) -> RunNode:
    """``conversation_id`` and everything it delegated (NotFoundError when unknown)."""
    budget = [MAX_NODES]

    async def node(record_id: str, depth: int) -> RunNode:
        record = await store.get_conversation(record_id)
        budget[0] -= 1
        children: list[RunNode] = []
        if depth < 16:
            for child in await store.list_children(record.id):
                if budget[0] <= 0:
                    break
                children.append(await node(child.id, depth + 1))
        own = await ledger_spend(store, record.id)
        return RunNode(
            **record.model_dump(include=_FROM_RECORD),
            cost_usd=own,
            tree_cost_usd=total([own, *(c.tree_cost_usd for c in children)]),
            title=record.task.title,
            children=children,
        )

    return await node(conversation_id, 0)


def members(node: RunNode) -> list[RunNode]:
    """``node`` and everything under it, the node first."""
    return [node, *(member for child in node.children for member in members(child))]


async def committed_spend(
    store: TreeStore, conversation_id: str, tree: RunNode | None = None
) -> Decimal:
    """What the conversation's budget has paid for or promised: its subtree's ledger spend
    and, on a shared ledger, every hold its runs still have. A new run's ceiling is the budget
    less this (``RunBinding.of``), so a run that died holding a request is charged for it.

    A child's share is enforced here and in the carve, not by admission: the shared rule keeps
    its two budgets (the execution's and the tree's), and this read runs once per run, where a
    third budget would read a subtree in every admission's locked transaction. ``tree``, when
    given, is the conversation's ``run_tree`` just read.
    """
    tree = tree or await run_tree(store, conversation_id)
    if not isinstance(store, SharedBudgetLedger):  # embedded (SQLite): no holds in the ledger
        return tree.tree_cost_usd
    return await store.committed_budget(conversation_id, [m.id for m in members(tree)])
