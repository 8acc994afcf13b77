"""Shared set-up for the write_now red-team tests: a store with one run and a ceiling."""

from __future__ import annotations

import secrets
from decimal import Decimal
from pathlib import Path

from synthorg.domain.money import fits_or_alone
from synthorg.store.protocol import BudgetFigures, BudgetHold
from synthorg.store.sqlite import SqliteStore
from tests.store.store_helpers import record, uid


class Refused(Exception):
    """The run's ceiling is reached: nothing more is admitted."""


def rule(ceiling: Decimal, worst: Decimal):
    """The shared admission rule (admission._shared_rule, execution ceiling only)."""

    def admit(figures: BudgetFigures) -> bool:
        spent = figures.execution.cost_usd
        if spent >= ceiling:
            raise Refused(str(spent))
        return fits_or_alone(ceiling, spent, figures.reserved, worst)

    return admit


async def run_with_ceiling(path: Path, ceiling: Decimal | None) -> tuple[SqliteStore, str, str]:
    store = await SqliteStore.open(path)
    conversation = record()
    await store.create_conversation(conversation)
    execution = uid("ex")
    await store.open_execution(
        execution_id=execution,
        conversation_id=conversation.id,
        model="m",
        provider="p",
        cost_ceiling_usd=ceiling,
    )
    return store, execution, conversation.id


def new_hold(execution: str, conversation: str, amount: Decimal) -> BudgetHold:
    return BudgetHold(
        reservation_id=f"r-{secrets.token_hex(8)}",
        execution_id=execution,
        conversation_id=conversation,
        amount=amount,
        tokens_in=1,
        tokens_out=1,
    )
