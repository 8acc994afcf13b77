"""The run's one bearer: what it binds (RunGrant) and who mints it (the BearerMinter protocol)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from synthorg.domain import ConversationRecord
from synthorg.domain.money import remaining


@dataclass(frozen=True)
class RunGrant:
    """What a run's bearer binds: who runs what, on which provider and model, up to which cost."""

    execution_id: str
    agent_id: str
    task_id: str
    project_id: str
    conversation_id: str
    provider: str
    model_id: str
    cost_ceiling: Decimal | None

    @classmethod
    def of(
        cls, record: ConversationRecord, execution_id: str, *, spent: Decimal = Decimal(0)
    ) -> RunGrant:
        """The grant of a run of ``record``: its ceiling is the conversation's budget less what
        its earlier runs ``spent`` (a resumed run continues the budget, never starts afresh)."""
        budget = record.budget_usd
        return cls(
            execution_id=execution_id,
            agent_id=record.agent.id,
            task_id=record.task.id,
            project_id=record.task.project_id,
            conversation_id=record.id,
            provider=record.provider,
            model_id=record.model,
            cost_ceiling=remaining(budget, spent),
        )


class BearerMinter(Protocol):
    """Opens a run's execution at the gateway and mints its bearer: once per run.

    Every loop of the run (and the sandbox in it) uses that one bearer; it dies with the run
    at ``close``.
    """

    async def open(self, grant: RunGrant) -> str:
        """Open the execution in the ledger and return the run's bearer (fails loud when the
        model is not bound to the provider)."""
        ...

    async def close(self, execution_id: str, why: str) -> None:
        """End the execution: its bearer is refused from now on."""
        ...
