"""Request and response models of the REST API (the OpenAPI schema is generated from them)."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from pathlib import PurePath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synthorg.domain import (
    Complexity,
    ConfirmationPolicy,
    ConversationRecord,
    ConversationStatus,
    PendingAction,
    StoredEvent,
    Task,
    TerminationReason,
    TokenUsage,
    WorkspaceInfo,
    new_id,
)
from synthorg.domain.ids import Identifier
from synthorg.engine.control import Decision
from synthorg.server.auth import ApiKey, Role
from synthorg.service.options import RunOptions
from synthorg.workspace.models import CommitInfo, FileChange
from synthorg.workspace.remote import PROJECT_REFERENCE, project_name

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def project_from_repository(repository: str) -> str:
    """A project id from the repository's directory name or project:NAME (made
    identifier-safe)."""
    name = _UNSAFE.sub("-", project_name(repository) or PurePath(repository).name)
    name = name.strip("-._")[:128]
    return name or "default"


REPOSITORY_PATTERN = rf"^(/[^\x00]*|{PROJECT_REFERENCE})$"
"""A repository as a client names it: an absolute path (no NUL) or project:NAME."""
REPOSITORY_MAX_CHARS = 4096


class CreateConversation(RunOptions):
    """A new conversation: the task, where it runs, and the run options (flat, as RunOptions)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repository: str = Field(
        min_length=2,
        max_length=REPOSITORY_MAX_CHARS,
        pattern=REPOSITORY_PATTERN,
        description="Absolute path of the git repository on the server (under the allowed "
        "roots; the server's data dir is never one), or project:NAME for a project with a "
        "remote ([projects.NAME]: it travels between workers).",
    )
    prompt: str = Field(min_length=1, description="The task given to the agent.")
    project_id: Identifier | None = Field(
        default=None, description="Project id; default: the repository's directory name."
    )
    task_id: Identifier | None = Field(default=None, description="Task id; default: a new id.")
    complexity: Complexity = Field(default=Complexity.MODERATE, description="Judged difficulty.")
    artifacts_expected: bool = Field(
        default=True,
        description="The task must change files: completed with an unchanged worktree is NO_OP.",
    )
    start: bool = Field(default=True, description="Start the run right away.")

    def task(self) -> Task:
        """The domain task."""
        return Task(
            id=self.task_id or new_id("task"),
            project_id=self.project_id or project_from_repository(self.repository),
            prompt=self.prompt,
            complexity=self.complexity,
            artifacts_expected=self.artifacts_expected,
            repository=self.repository,
        )

    def options(self) -> RunOptions:
        """The run options (the RunOptions fields of this request)."""
        return RunOptions.model_validate(self, from_attributes=True)


class TaskView(BaseModel):
    """The task of a conversation."""

    id: str = Field(description="Task id.")
    project_id: str = Field(description="Project id.")
    prompt: str = Field(description="The instruction.")
    complexity: Complexity = Field(description="Judged difficulty.")
    repository: str = Field(description="Repository path.")


class ConversationView(BaseModel):
    """A conversation as clients see it (secrets never leave the server)."""

    id: str = Field(description="Conversation id.")
    status: ConversationStatus = Field(description="Lifecycle status.")
    active: bool = Field(description="A run is in progress in this server process.")
    task: TaskView = Field(description="The task.")
    loop_type: str = Field(description="Execution loop.")
    model: str = Field(description="Bound model.")
    provider: str = Field(description="Bound provider.")
    created_at: datetime = Field(description="Creation time (UTC).")
    updated_at: datetime = Field(description="Last change (UTC).")
    workspace: WorkspaceInfo | None = Field(description="Worktree path, branch and base.")
    max_turns: int = Field(description="Turn cap per run.")
    budget_usd: Decimal | None = Field(description="Cost ceiling over all its runs.")
    confirmation_policy: ConfirmationPolicy = Field(description="When actions wait.")
    execution_id: str | None = Field(description="Latest run id.")
    runs: int = Field(description="Runs started.")
    termination_reason: TerminationReason | None = Field(description="Why the last run ended.")
    usage: TokenUsage = Field(description="Tokens and cost over all runs.")
    turns: int = Field(description="Action turns over all runs.")
    commit_sha: str | None = Field(description="Latest commit landed by the gate.")
    error: str | None = Field(description="Latest error.")
    labels: dict[str, str] = Field(description="Free-form labels.")
    parent_id: str | None = Field(default=None, description="The conversation that delegated it.")
    root_id: str | None = Field(default=None, description="The root of its delegation tree.")

    @classmethod
    def of(cls, record: ConversationRecord, *, active: bool) -> ConversationView:
        """The view of a stored record (its fields by name; anything else stays behind)."""
        return cls.model_validate({**dict(record), "active": active}, from_attributes=True)


class ConversationList(BaseModel):
    """One page of conversations, newest first."""

    items: list[ConversationView] = Field(description="The conversations on this page.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; None at end.")


class Count(BaseModel):
    """How many conversations match."""

    count: int = Field(ge=0, description="The number of matching conversations.")


class Deleted(BaseModel):
    """A conversation was removed."""

    id: str = Field(description="The removed conversation.")
    deleted: bool = Field(description="Always true.")


MESSAGE_MAX_CHARS = 200_000
"""The longest message for the agent (REST and WebSocket alike)."""


class SendMessage(BaseModel):
    """A message for the agent."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MESSAGE_MAX_CHARS, description="The message.")
    run: bool = Field(
        default=True, description="Start or continue a run with it (while running it steers)."
    )


Delivery = Literal["steered", "started", "recorded"]


class MessageResult(BaseModel):
    """What happened to a message."""

    conversation_id: str = Field(description="The conversation.")
    delivery: Delivery = Field(
        description="steered: the active run reads it next turn; started: a run began with it; "
        "recorded: appended to the log for a later run."
    )


ControlAction = Literal["pause", "interrupt", "resume", "cancel"]


class ControlResult(BaseModel):
    """A control command was accepted."""

    conversation_id: str = Field(description="The conversation.")
    action: ControlAction = Field(description="The command.")
    status: ConversationStatus = Field(description="Status right after the command was accepted.")


class RollbackResult(BaseModel):
    """The worktree was restored to a checkpoint."""

    conversation_id: str = Field(description="The conversation.")
    checkpoint: int = Field(description="The checkpoint the worktree now matches.")
    by: str = Field(description="Who rolled back (recorded in the conversation's events).")


class PendingView(BaseModel):
    """Actions waiting for a decision."""

    conversation_id: str = Field(description="The conversation.")
    status: ConversationStatus = Field(description="Its status.")
    request_seq: int | None = Field(description="Seq of the confirmation request; None if none.")
    pending: list[PendingAction] = Field(description="Actions still undecided.")


class DecisionRequest(BaseModel):
    """A decision on pending actions, by id: at least one id, accepted or rejected."""

    model_config = ConfigDict(
        extra="forbid",
        # The "at least one id" rule, in the schema too (the validator below enforces it).
        json_schema_extra={
            "anyOf": [
                {"required": ["accepted"], "properties": {"accepted": {"minItems": 1}}},
                {"required": ["rejected"], "properties": {"rejected": {"minItems": 1}}},
            ]
        },
    )

    accepted: list[Identifier] = Field(default_factory=list, description="Action ids to run.")
    rejected: list[Identifier] = Field(default_factory=list, description="Action ids to refuse.")
    reason: str = Field(default="", max_length=4000, description="Why (shown to the agent).")

    @model_validator(mode="after")
    def _names_an_action(self) -> DecisionRequest:
        if not self.accepted and not self.rejected:
            raise ValueError("name at least one action id in accepted or rejected")
        return self

    def decision(self, approver: str) -> Decision:
        """The engine's decision, made by ``approver``; UsageError (400 on REST and on the
        local socket) for an id both accepted and rejected: the rule lives in Decision."""
        return Decision(
            accepted=frozenset(self.accepted),
            rejected=frozenset(self.rejected),
            approver=approver,
            reason=self.reason,
        )


class DecisionResult(BaseModel):
    """A decision was delivered to the run."""

    conversation_id: str = Field(description="The conversation.")
    accepted: list[str] = Field(description="Accepted ids.")
    rejected: list[str] = Field(description="Rejected ids.")
    approver: str = Field(description="The authenticated principal recorded as approver.")


class EventPage(BaseModel):
    """A page of the event log in seq order."""

    items: list[StoredEvent] = Field(description="Events.")
    last_seq: int = Field(ge=0, description="Highest seq of the conversation right now.")
    next_after: int | None = Field(
        description="Pass as ?after= for the following page; None when this page was not full."
    )


class Changes(BaseModel):
    """Files that differ from the base ref."""

    items: list[FileChange] = Field(description="Changed paths, sorted.")


class Diff(BaseModel):
    """A unified diff from the base ref to the worktree."""

    path: str | None = Field(description="The path diffed; None for the whole worktree.")
    diff: str = Field(description="Unified diff text.")


class Commits(BaseModel):
    """Commits on the conversation's branch since its base."""

    items: list[CommitInfo] = Field(description="Newest first.")


class CreateKey(BaseModel):
    """A new API key."""

    model_config = ConfigDict(extra="forbid")

    principal: str = Field(min_length=1, max_length=200, description="Who it authenticates.")
    roles: list[Role] = Field(min_length=1, description="Roles granted.")
    projects: list[Identifier] = Field(
        default_factory=list,
        description="Scope the key to these projects (it sees and controls only their "
        "conversations); empty: every project.",
    )


class KeyView(BaseModel):
    """An API key's record (never the key)."""

    id: str = Field(description="Key id.")
    principal: str = Field(description="Principal.")
    roles: list[Role] = Field(description="Roles.")
    projects: list[str] = Field(description="Projects the key is scoped to; empty: every one.")
    created_at: datetime = Field(description="Creation time.")
    revoked_at: datetime | None = Field(description="Revocation time.")

    @classmethod
    def of(cls, key: ApiKey) -> KeyView:
        """The view of a stored key (never its hash)."""
        return cls.model_validate(key, from_attributes=True)


class KeyCreated(BaseModel):
    """A new key; the secret is shown only here."""

    key: str = Field(description="The API key: send as 'Authorization: Bearer <key>'.")
    record: KeyView = Field(description="Its record.")


class Health(BaseModel):
    """Liveness."""

    status: Literal["ok"] = Field(description="Always ok while the process serves.")


class Ready(BaseModel):
    """Readiness: the store answers."""

    ready: bool = Field(description="Whether requests can be served.")
    detail: str = Field(description="Why not, when not ready.")
