"""The ExecutionLoop protocol and the context a loop runs in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol, runtime_checkable

from synthorg.domain import (
    AgentIdentity,
    ConfirmationPolicy,
    ConversationEvent,
    ExecutionResult,
    StoredEvent,
    Task,
    TokenUsage,
    WorkspaceInfo,
)
from synthorg.engine.control import RunControl


class EventSink(Protocol):
    """Where a loop reports each event; raises ``Terminated`` when the run must stop.

    The runner's sink makes the event durable, fans it out, then consults the budget,
    shutdown and cancellation checkers: this is the event boundary of seed 000.
    """

    async def __call__(self, event: ConversationEvent) -> None: ...


UsageProbe = Callable[[], Awaitable[TokenUsage]]
"""The running accumulated usage of this execution, as the gateway's ledger has it."""


@dataclass(frozen=True)
class GatewayAccess:
    """How a loop reaches models: the gateway URL and the run's bearer."""

    base_url: str
    bearer: str
    usage: UsageProbe
    mcp_base_url: str | None = None


@dataclass(frozen=True)
class LoopContext:
    """Everything one run of a loop needs; built by the runner."""

    task: Task
    agent: AgentIdentity
    conversation_id: str
    execution_id: str
    model: str
    provider: str
    workspace: WorkspaceInfo
    gateway: GatewayAccess
    emit: EventSink
    control: RunControl
    max_turns: int
    budget_usd: Decimal | None = None
    prior_usage: TokenUsage | None = None
    """What the conversation's earlier runs spent (the ledger's); the record's totals start
    from it, so a run the host died in still counts."""
    confirmation_policy: ConfirmationPolicy = ConfirmationPolicy.NEVER
    resumed: bool = False
    prior_events: Sequence[StoredEvent] = field(default_factory=tuple)


@runtime_checkable
class ExecutionLoop(Protocol):
    """An inner execution loop: react, plan_execute, hybrid or openhands."""

    def get_loop_type(self) -> str:
        """The registry name of this loop."""
        ...

    async def execute(self, context: LoopContext) -> ExecutionResult:
        """Run the task to a termination reason; never raises for an ordinary stop."""
        ...
