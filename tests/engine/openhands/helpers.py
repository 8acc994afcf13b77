"""A loop context for unit tests: a recording sink whose stop answer the test controls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from synthorg.domain import (
    AgentIdentity,
    ConfirmationPolicy,
    ConversationEvent,
    StoredEvent,
    Task,
    TerminationReason,
    TokenUsage,
    WorkspaceInfo,
)
from synthorg.engine import RunControl, Terminated
from synthorg.engine.openhands import OpenHandsLoopDeps
from synthorg.engine.openhands.fake import FakeConversationFactory, ScriptItem
from synthorg.engine.protocol import GatewayAccess, LoopContext

MODEL = "scripted-oh"
PROVIDER = "scripted"


@dataclass
class Recorder:
    """The runner's sink stand-in: records events, raises a stop (once) when told to."""

    events: list[ConversationEvent] = field(default_factory=list)
    stop_when: Callable[[ConversationEvent, list[ConversationEvent]], TerminationReason | None] = (
        lambda event, seen: None
    )

    stopped: TerminationReason | None = None

    async def __call__(self, event: ConversationEvent) -> None:
        self.events.append(event)
        if self.stopped is not None:
            return
        self.stopped = self.stop_when(event, self.events)
        if self.stopped is not None:
            raise Terminated(self.stopped)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: str) -> list[ConversationEvent]:
        return [e for e in self.events if e.kind == kind]


def make_context(
    recorder: Recorder,
    *,
    control: RunControl | None = None,
    artifacts_expected: bool = True,
    resumed: bool = False,
    policy: ConfirmationPolicy = ConfirmationPolicy.NEVER,
    model: str = MODEL,
    budget: Decimal | None = None,
    prior: Sequence[StoredEvent] = (),
    max_turns: int = 30,
) -> LoopContext:
    async def usage() -> TokenUsage:
        return TokenUsage()

    return LoopContext(
        task=Task(
            id="task-1",
            project_id="proj-1",
            prompt="Write notes.txt",
            repository="/nonexistent",
            artifacts_expected=artifacts_expected,
        ),
        agent=AgentIdentity(id="agent-1"),
        conversation_id="conv-1",
        execution_id="exec-1",
        model=model,
        provider=PROVIDER,
        workspace=WorkspaceInfo(path="/tmp/ws", branch="synthorg/conv-1"),
        gateway=GatewayAccess(base_url="http://host/v1", bearer="host-bearer", usage=usage),
        emit=recorder,
        control=control or RunControl(),
        max_turns=max_turns,
        budget_usd=budget,
        confirmation_policy=policy,
        resumed=resumed,
        prior_events=tuple(prior),
    )


def make_deps(
    *scripts: Sequence[ScriptItem], **kwargs: object
) -> tuple[OpenHandsLoopDeps, FakeConversationFactory]:
    factory = FakeConversationFactory(*scripts)
    deps = OpenHandsLoopDeps(
        conversation_factory=factory,
        gateway_base_url="http://127.0.0.1:18080/v1",
        mcp_base_url="http://127.0.0.1:18081/mcp",
        input_cost_per_token=2e-6,
        output_cost_per_token=8e-6,
        **kwargs,  # type: ignore[arg-type]
    )
    return deps, factory
