"""The store boundary: conversation base state, the append-only event log, the cost ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain import (
    ConversationEvent,
    ConversationRecord,
    ConversationStatus,
    StatusChangeEvent,
    StoredEvent,
)
from synthorg.store.tail import ChangeWatcher


class ConversationPage(BaseModel):
    """One page of conversations, newest first, with the cursor of the next page."""

    model_config = ConfigDict(frozen=True)

    items: tuple[ConversationRecord, ...] = Field(description="The conversations on this page.")
    next_cursor: str | None = Field(default=None, description="Opaque cursor; None at the end.")


class ReconcileReport(BaseModel):
    """What reconciliation of conversations left behind by dead owners changed."""

    model_config = ConfigDict(frozen=True)

    conversations_interrupted: tuple[str, ...] = Field(
        default=(), description="Conversations a dead process left active, now interrupted."
    )
    actions_reconciled: tuple[tuple[str, str], ...] = Field(
        default=(), description="(conversation id, action id) given an error observation."
    )


class RunClaimant(BaseModel):
    """Who wants to own a conversation: one process on one host."""

    model_config = ConfigDict(frozen=True)

    owner_id: str = Field(min_length=1, description="Unique per claim (never reused).")
    host: str = Field(min_length=1, description="Host name of the claiming process.")
    pid: int = Field(gt=0, description="Process id on that host.")


class RunOwner(RunClaimant):
    """The live owner record of a conversation: at most one per conversation."""

    since: datetime = Field(description="When this owner took the conversation (UTC).")
    heartbeat_at: datetime = Field(description="Its last heartbeat (UTC).")
    expires_at: datetime = Field(description="The lease runs out then unless renewed (UTC).")
    expired: bool = Field(description="The lease had run out when this was read (store clock).")

    def describe(self) -> str:
        """Who holds it, for messages: host, pid, since."""
        return f"pid {self.pid} on {self.host} since {self.since.isoformat(timespec='seconds')}"


OVERREPORT = "upstream_overreport"
"""How a run killed for its upstream's over-report starts its status reason (the gateway writes
it; ``LedgerStore.overreporting_providers`` counts it)."""


class ExecutionStatus(StrEnum):
    """Lifecycle of one execution in the gateway's ledger."""

    ACTIVE = "active"
    FINISHED = "finished"
    KILLED = "killed"


class ExecutionUsage(BaseModel):
    """The ledger row of one execution: running totals and status."""

    model_config = ConfigDict(frozen=True)

    execution_id: str = Field(description="The execution (run) id.")
    conversation_id: str = Field(description="The conversation it belongs to.")
    model: str = Field(description="The bound model id.")
    provider: str = Field(description="The bound provider.")
    cost_ceiling_usd: Decimal | None = Field(description="Hard cost ceiling; None for none.")
    requests: int = Field(default=0, ge=0, description="Model requests made.")
    tokens_in: int = Field(default=0, ge=0, description="Prompt tokens so far.")
    tokens_out: int = Field(default=0, ge=0, description="Completion tokens so far.")
    cost_usd: Decimal = Field(default=Decimal(0), ge=0, description="Accumulated cost.")
    status: ExecutionStatus = Field(default=ExecutionStatus.ACTIVE, description="Status.")
    status_reason: str = Field(default="", description="Why it was finished or killed.")
    updated_at: datetime | None = Field(default=None, description="Last change (UTC).")
    lease_expires_at: datetime | None = Field(
        default=None,
        description="Alive only until then (its owner's lease, renewed with it); None: the "
        "row is not leased (opened for a conversation no process owned, e.g. a manual bearer).",
    )


class TreeBudget(BaseModel):
    """The one budget of a delegation tree: its root's ceiling and what every run in it spent."""

    model_config = ConfigDict(frozen=True)

    root_id: str = Field(description="The root conversation of the tree.")
    ceiling: Decimal = Field(description="The root's budget: the whole tree's cost ceiling.")
    spent: Decimal = Field(description="Ledger spend of every run of every conversation in it.")


@runtime_checkable
class ConversationStore(Protocol):
    """Base state + append-only event log, keyed by conversation id."""

    async def create_conversation(self, record: ConversationRecord) -> None:
        """Persist a new conversation; ConflictError if the id exists."""
        ...

    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        """The conversation's base state; NotFoundError if unknown."""
        ...

    async def save_conversation(self, record: ConversationRecord) -> None:
        """Replace the base state of an existing conversation; NotFoundError if unknown."""
        ...

    async def list_conversations(
        self,
        *,
        status: ConversationStatus | None = None,
        project_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        search: str | None = None,
        forge_events: Sequence[str] = (),
    ) -> ConversationPage:
        """Conversations newest first, filtered, cursor-paginated (stable under inserts).

        ``search`` keeps those whose task text contains it (ASCII letters case-insensitively);
        ``forge_events`` those a forge delivery of one of these events started or resumed.
        """
        ...

    async def list_children(self, parent_id: str) -> list[ConversationRecord]:
        """The conversations ``parent_id`` delegated to, oldest first."""
        ...

    async def count_conversations(
        self,
        *,
        status: ConversationStatus | None = None,
        project_id: str | None = None,
        search: str | None = None,
        forge_events: Sequence[str] = (),
    ) -> int:
        """How many conversations match (the same filters as ``list_conversations``)."""
        ...

    async def delete_conversation(self, conversation_id: str) -> None:
        """Remove the conversation and its events, and with a root its whole tree (every
        conversation whose ``root_id`` it is); NotFoundError if unknown. Ledger rows are kept."""
        ...

    async def append(self, conversation_id: str, event: ConversationEvent) -> StoredEvent:
        """Append durably (committed before returning); seq is monotonic per conversation."""
        ...

    async def history(
        self,
        conversation_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        since: datetime | None = None,
        kinds: frozenset[str] | None = None,
        limit: int = 100,
    ) -> list[StoredEvent]:
        """Events in seq order, strictly after/before the given seqs, at most ``limit``."""
        ...

    def tail(self, conversation_id: str, *, after: int = 0) -> AsyncIterator[StoredEvent]:
        """Every event with seq > after, then live ones as appended: exactly once, in order."""
        ...

    def watch_changes(self) -> AbstractContextManager[ChangeWatcher]:
        """A watcher told of every conversation created, changed or deleted (see ``tail``)."""
        ...

    async def last_seq(self, conversation_id: str) -> int:
        """The highest seq of the conversation (0 when it has no events)."""
        ...

    async def transition(self, record: ConversationRecord, event: StatusChangeEvent) -> StoredEvent:
        """Append the status event and save ``record`` in ONE transaction (both or neither).

        ``record.status`` must be ``event.new``; NotFoundError if the conversation is unknown.
        """
        ...

    async def claim_conversation(
        self,
        conversation_id: str,
        claimant: RunClaimant,
        *,
        lease_s: float,
        displace: str | None = None,
    ) -> RunOwner:
        """Atomically become the conversation's owner for ``lease_s`` seconds.

        Succeeds when it has no owner, its owner's lease ran out, the owner is this claimant
        (re-entrant), or the owner's id is ``displace`` (an owner known to be dead). Otherwise
        ConversationOwnedError naming the holder. NotFoundError for an unknown conversation.
        """
        ...

    async def renew_claim(self, conversation_id: str, owner_id: str, *, lease_s: float) -> bool:
        """Extend the lease, and with it the lease of the conversation's active executions
        (in the same transaction); False when ``owner_id`` no longer owns the conversation."""
        ...

    async def release_conversation(self, conversation_id: str, owner_id: str) -> None:
        """Drop the owner record if ``owner_id`` still holds it (no-op otherwise)."""
        ...

    async def conversation_owner(self, conversation_id: str) -> RunOwner | None:
        """The owner record, expired or not; None when nobody holds it."""
        ...

    async def reconcile_after_restart(self) -> ReconcileReport:
        """Reconcile every active conversation whose owner is dead (see ``store.reconcile``)."""
        ...

    async def close(self) -> None:
        """Release connections and background tasks."""
        ...


@runtime_checkable
class LedgerStore(Protocol):
    """The gateway's per-execution cost ledger."""

    @property
    def ledger_id(self) -> str:
        """This ledger's own random id, made once: a bearer is valid only at its issuer."""
        ...

    async def open_execution(
        self,
        *,
        execution_id: str,
        conversation_id: str,
        model: str,
        provider: str,
        cost_ceiling_usd: Decimal | None,
    ) -> ExecutionUsage:
        """Create the ledger row (idempotent for the same execution id). Its lease is the
        conversation's owner's at that moment (renewed with it), none when nobody owns it."""
        ...

    async def record_usage(
        self, execution_id: str, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        """Atomically add one request's figures; returns the new totals."""
        ...

    async def get_execution(self, execution_id: str) -> ExecutionUsage:
        """The ledger row; NotFoundError if unknown."""
        ...

    async def set_execution_status(
        self, execution_id: str, status: ExecutionStatus, reason: str = ""
    ) -> ExecutionUsage:
        """Mark finished or killed (a killed execution stays killed)."""
        ...

    async def executions_of(self, conversation_id: str) -> list[ExecutionUsage]:
        """Every ledger row of the conversation's runs, oldest first."""
        ...

    async def set_cost_ceiling(
        self, execution_id: str, cost_ceiling_usd: Decimal | None
    ) -> ExecutionUsage:
        """Change an execution's ceiling (delegation carves children's out of it)."""
        ...

    async def overreporting_providers(self) -> dict[str, int]:
        """Providers whose reported usage broke a request's bound, with how many runs that
        killed (status reason starting with ``OVERREPORT``); empty when none did."""
        ...

    async def tree_budget(self, conversation_id: str) -> TreeBudget | None:
        """The budget of the tree the conversation belongs to (its root's ``budget_usd``
        against the ledger rows of the root and all its descendants, over all their runs);
        None when the conversation is unknown or its root has no budget."""
        ...


class BudgetHold(BaseModel):
    """One admitted request's reservation in the shared ledger (see ``SharedBudgetLedger``)."""

    model_config = ConfigDict(frozen=True)

    reservation_id: str = Field(description="Unique id, made by the admitting gateway.")
    execution_id: str = Field(description="The execution it is charged to.")
    conversation_id: str = Field(description="Its conversation (names the tree's lock).")
    amount: Decimal = Field(ge=0, description="The request's worst case: what is held.")
    tokens_in: int = Field(ge=0, description="Prompt tokens billed if it expires unsettled.")
    tokens_out: int = Field(ge=0, description="Output tokens billed if it expires unsettled.")


class BudgetFigures(BaseModel):
    """What an admission decides on, read under the budget's lock: spend and live holds."""

    model_config = ConfigDict(frozen=True)

    execution: ExecutionUsage = Field(description="The execution's ledger row.")
    reserved: Decimal = Field(description="Live reservations of the execution, every holder.")
    tree: TreeBudget | None = Field(description="Its delegation tree's budget; None for none.")
    tree_reserved: Decimal = Field(description="Live reservations of the whole tree.")


@runtime_checkable
class SharedBudgetLedger(Protocol):
    """A ledger shared by processes: admission holds each request's worst case in it.

    ``reserve_budget`` takes the budget's lock (the tree's root, else the conversation), bills
    the holds whose lease ran out their whole amount (the incomplete bill: their holder died
    with the request in flight), reads the figures, asks ``admit`` and, when it says yes,
    stores the hold, all in one transaction. ``admit`` may raise to refuse. The hold lives until
    ``settle_reservation`` replaces it by the actual bill (one statement) or its lease expires;
    holders renew their live holds' leases.
    """

    async def reserve_budget(
        self,
        hold: BudgetHold,
        *,
        holder: str,
        lease_s: float,
        admit: Callable[[BudgetFigures], bool],
    ) -> bool:
        """Store ``hold`` if ``admit`` accepts the figures; False when it declined (wait)."""
        ...

    async def committed_budget(self, conversation_id: str, members: Sequence[str]) -> Decimal:
        """Under the budget's lock of ``conversation_id``, bill its expired holds (as
        ``reserve_budget`` does) and return what the runs of ``members`` (conversation ids)
        spent plus what they hold now, read in one snapshot."""
        ...

    async def settle_reservation(
        self, hold: BudgetHold, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        """Drop the hold and record the request's bill atomically; if the hold had expired
        (and was billed in full) only the bill's excess over it is added."""
        ...

    async def renew_reservations(
        self, holder: str, reservation_ids: Sequence[str], *, lease_s: float
    ) -> int:
        """Extend the lease of the holder's listed holds that still exist; how many."""
        ...


@runtime_checkable
class EvalRecordStore(Protocol):
    """Evaluations' durable state: one JSON document per (eval id, key), upserted."""

    async def put_eval_item(self, eval_id: str, key: str, body: dict[str, Any]) -> None:
        """Write (or replace) one item; durable when this returns."""
        ...

    async def eval_items(self, eval_id: str, prefix: str = "") -> dict[str, dict[str, Any]]:
        """The eval's items whose key starts with ``prefix``, by key."""
        ...

    async def eval_ids(self) -> list[str]:
        """Every eval with at least one item, newest first."""
        ...


class IdempotencySlot(BaseModel):
    """Where an idempotency key lives: per caller (API key) and per route."""

    model_config = ConfigDict(frozen=True)

    caller: str = Field(description="The API key's id (keys are per caller).")
    route: str = Field(description="The route the key was sent to.")
    key: str = Field(description="The client's Idempotency-Key.")


class IdempotencyRecord(BaseModel):
    """What is remembered of the first request with a key."""

    model_config = ConfigDict(frozen=True)

    fingerprint: str = Field(description="Hash of the first request's body.")
    status: int | None = Field(description="Its response status; None while it is in progress.")
    body: Any = Field(default=None, description="Its response body (JSON), once it succeeded.")


@runtime_checkable
class IdempotencyStore(Protocol):
    """Idempotency keys that outlive the server process (exactly-once across a restart)."""

    async def claim_idempotency_key(
        self, slot: IdempotencySlot, fingerprint: str, *, ttl_s: float
    ) -> IdempotencyRecord | None:
        """Claim ``slot`` for a new request (None), or the record already there. Keys older
        than their ``ttl_s`` are forgotten first."""
        ...

    async def complete_idempotency_key(self, slot: IdempotencySlot, status: int, body: Any) -> None:
        """Remember the response of the request that claimed ``slot``."""
        ...

    async def release_idempotency_key(self, slot: IdempotencySlot) -> None:
        """Forget a claim whose request failed (it changed nothing; a retry may run)."""
        ...


class DeliveryState(StrEnum):
    """Where a forge delivery is: queued for the background, or what was done with it."""

    QUEUED = "queued"
    STARTED = "started"  # a run was started or resumed
    REFUSED = "refused"  # an author not allowed, a cap reached: nothing started
    FAILED = "failed"  # the work could not be done (the outcome says why)
    SKIPPED = "skipped"  # nothing to do after all (e.g. feedback on a PR not known here)


class DeliveryRecord(BaseModel):
    """One accepted forge delivery, kept by its delivery id (a redelivery is the same row)."""

    model_config = ConfigDict(frozen=True)

    delivery_id: str = Field(description="X-GitHub-Delivery.")
    project_id: str = Field(description="The project whose webhook received it.")
    event: str = Field(description="X-GitHub-Event and the action, e.g. issues.labeled.")
    state: DeliveryState = Field(description="Queued, or what was done.")
    outcome: str = Field(default="", description="What was done, in a sentence.")
    issue: int | None = Field(default=None, description="The issue or pull request number.")
    conversation_id: str | None = Field(default=None, description="The conversation it drove.")
    payload: dict[str, Any] = Field(description="The delivery's JSON body.")
    received_at: datetime = Field(description="When it was accepted.")
    updated_at: datetime = Field(description="When its state last changed.")


class ForgePull(BaseModel):
    """The pull request the control plane opened for a conversation, as the forge answered."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str = Field(description="The conversation whose branch it merges.")
    project_id: str = Field(description="The project it belongs to.")
    number: int = Field(description="The pull request's number.")
    html_url: str = Field(description="The forge's html_url of it (untrusted until checked).")
    updated_at: datetime = Field(description="When it was last opened or updated.")


@runtime_checkable
class ForgeDeliveryStore(Protocol):
    """Forge deliveries that outlive the server: deduplicated, queued, settled."""

    async def record_delivery(self, record: DeliveryRecord) -> bool:
        """Insert ``record``; False (nothing written) when its delivery id is already kept."""
        ...

    async def queued_deliveries(self, limit: int) -> list[DeliveryRecord]:
        """The oldest deliveries still queued."""
        ...

    async def settle_delivery(
        self,
        delivery_id: str,
        state: DeliveryState,
        outcome: str,
        *,
        conversation_id: str | None = None,
    ) -> None:
        """Record what was done with a delivery."""
        ...

    async def recent_deliveries(
        self, limit: int, *, project_id: str | None = None
    ) -> list[DeliveryRecord]:
        """The newest deliveries (of one project when given)."""
        ...

    async def issue_conversation(self, project_id: str, issue: int) -> str | None:
        """The conversation the newest started delivery of this issue (or PR) drove."""
        ...

    async def conversation_deliveries(self, conversation_id: str) -> list[DeliveryRecord]:
        """The deliveries that drove (or were refused on) a conversation, oldest first."""
        ...

    async def record_pull(
        self, conversation_id: str, project_id: str, number: int, html_url: str
    ) -> None:
        """Keep the pull request opened (or updated) for a conversation; replaces the last."""
        ...

    async def conversation_pull(self, conversation_id: str) -> ForgePull | None:
        """The pull request opened for a conversation, if any."""
        ...


class Store(
    ConversationStore,
    LedgerStore,
    EvalRecordStore,
    IdempotencyStore,
    ForgeDeliveryStore,
    Protocol,
):
    """One backend serves both: conversations and the ledger share a database."""
