"""Budget, shutdown and task-cancellation checkers, consulted at every event boundary."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal

from synthorg.domain import TerminationReason, TokenUsage
from synthorg.domain.money import reached

Check = Callable[[], Awaitable[bool]]
"""True means: stop now."""


def budget_checker(usage: Callable[[], Awaitable[TokenUsage]], ceiling: Decimal | None) -> Check:
    """Stop once the accumulated cost reached the ceiling (the gateway kill stays authoritative)."""

    async def exhausted() -> bool:
        if ceiling is None:
            return False
        return reached(ceiling, (await usage()).cost_usd)

    return exhausted


def flag_checker(flag: asyncio.Event) -> Check:
    """Stop once ``flag`` is set (shutdown of the process, cancellation of the task)."""

    async def is_set() -> bool:
        return flag.is_set()

    return is_set


async def never() -> bool:
    """A checker that never stops the run."""
    return False


@dataclass(frozen=True)
class RunCheckers:
    """The three checkers of seed 000, in the order they are consulted."""

    task_cancellation: Check = never
    shutdown: Check = never
    budget: Check = never

    async def stop_reason(self) -> TerminationReason | None:
        """The first checker that asks to stop, as a termination reason."""
        if await self.task_cancellation():
            return TerminationReason.CANCELLED
        if await self.shutdown():
            return TerminationReason.SHUTDOWN
        if await self.budget():
            return TerminationReason.BUDGET_EXHAUSTED
        return None
