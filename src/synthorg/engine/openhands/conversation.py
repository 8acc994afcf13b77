"""The runtime boundary of the OpenHands loop: the conversation protocol, its run spec and outcome.

The loop never touches the SDK: it hands an ``OpenHandsRunSpec`` to a ``ConversationFactory``
and drives the ``OpenHandsConversation`` it gets back. The real one runs the SDK inside the
sandbox (``container_runtime``); a deterministic fake (``fake``) emits scripted records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synthorg.engine.openhands.events import RuntimeRecord

ControlCommand = Mapping[str, object]
"""A control line for the runtime: {"type": "pause" | "interrupt" | "resume" | "message" |
"confirm", ...}; a confirm names every pending action id exactly once."""


class OpenHandsRunSpec(BaseModel):
    """Everything the in-sandbox entrypoint needs for one run; sent as its first stdin line.

    Field names are the entrypoint's wire names (it refuses unknown ones).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_prompt: str = Field(min_length=1, description="The task, the first user message.")
    model: str = Field(min_length=1, description="Model id at the gateway.")
    gateway_base_url: str = Field(min_length=1, description="Gateway base URL inside the sandbox.")
    gateway_token: str = Field(min_length=1, repr=False, description="The per-run bearer.")
    mcp_base_url: str | None = Field(
        default=None, description="Credentialed MCP endpoint inside the sandbox (None: no tools)."
    )
    workspace_path: str = Field(min_length=1, description="The worktree as seen inside.")
    persistence_dir: str = Field(min_length=1, description="SDK state dir as seen inside.")
    conversation_id: str = Field(min_length=1, description="Stable per-task id; same id resumes.")
    max_turns: int = Field(ge=1, description="The SDK's iteration cap for this run.")
    project_id: str = Field(min_length=1, description="The project (tags the SDK state).")
    confirmation_policy: Literal["never", "risky", "always"] = Field(
        default="never", description="Which actions wait for a decision."
    )
    risk_threshold: Literal["low", "medium", "high"] = Field(
        default="high", description="With 'risky': the lowest risk that waits."
    )
    security_analyzer: bool = Field(
        default=False, description="Have the model declare a risk for every action."
    )
    terminal_type: Literal["tmux", "subprocess"] | None = Field(
        default="subprocess", description="The SDK terminal backend (None: SDK's choice)."
    )
    input_cost_per_token: float | None = Field(
        default=None, ge=0, description="USD per prompt token (the gateway's price)."
    )
    output_cost_per_token: float | None = Field(
        default=None, ge=0, description="USD per completion token (the gateway's price)."
    )

    resume_messages: tuple[str, ...] = Field(
        default=(),
        description="User messages no run has seen yet; given to a resumed agent.",
    )
    resume_answers: dict[str, str] = Field(
        default_factory=dict,
        description="Action id -> the host's own observation of it (e.g. effect unknown): a "
        "resumed runtime answers its open calls with these before anything else.",
    )

    def wire_line(self) -> str:
        """The JSON line the entrypoint reads first."""
        return self.model_dump_json()


EventSink = Callable[[RuntimeRecord], Awaitable[bool]]
"""Receives every runtime record in order; returns False to request an early stop."""


class OpenHandsOutcome(BaseModel):
    """How a conversation's run ended, from the runtime's side."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    finished: bool = Field(default=False, description="The agent finished naturally.")
    final_message: str = Field(default="", description="The agent's closing summary.")
    error: str | None = Field(default=None, description="What failed, when the run failed.")
    error_code: str | None = Field(default=None, description="The runtime's error code.")
    stopped: bool = Field(default=False, description="The host stopped it early (sink/stop).")
    paused: bool = Field(default=False, description="The runtime paused at a step boundary.")
    exit_code: int | None = Field(default=None, description="The runtime process's exit status.")

    @model_validator(mode="after")
    def _finish_xor_error(self) -> OpenHandsOutcome:
        if self.finished and self.error is not None:
            raise ValueError("a natural finish and an error message are mutually exclusive")
        return self


class OpenHandsConversation(Protocol):
    """One run of an OpenHands conversation, driven from the host."""

    async def run(self, sink: EventSink) -> OpenHandsOutcome:
        """Start (or re-attach), feed every record to ``sink`` until the run ends or the sink
        returns False; tear the runtime down on every exit path, cancellation included."""
        ...

    async def send_control(self, command: ControlCommand) -> None:
        """Forward a control line to the running conversation (dropped when not running)."""
        ...

    async def stop(self) -> None:
        """End ``run`` early from outside the sink (e.g. a stop found while waiting)."""
        ...


ConversationFactory = Callable[[OpenHandsRunSpec], OpenHandsConversation]
"""Builds the conversation for a run spec: the sandboxed runtime, or a fake in tests."""
