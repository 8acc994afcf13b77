"""Reconciliation of conversations whose owning process died: the one place for that rule.

A conversation is run by exactly one owner (a lease in the store, renewed by a heartbeat). An
owner is dead when its lease ran out, or at once when it ran on this host and its pid is gone.
Whoever meets an active conversation with a dead (or no) owner — `synthorg run --resume`,
`synthorg conversations`, `synthorg serve` at start — takes the conversation over atomically
(only one claimant can), then: the previous runs' executions still open in the ledger are
killed (their bearers were already refused once the lease lapsed; now for good), every open
action gets an observation (an action that only awaited approval "never ran", any other
"effect unknown"), and the status becomes INTERRUPTED (resumable), event and row in one
transaction. Because the takeover is exclusive and the open actions are recomputed under it,
concurrent reconcilers answer each action once. ``sweep`` is the periodic form: live serves
and workers run it every renewal interval, so a dead run is reconciled with no reader.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Protocol

from synthorg.domain import (
    ActionEvent,
    ConfirmationDecisionEvent,
    ConfirmationRequestEvent,
    ConversationRecord,
    ConversationStatus,
    ObservationEvent,
    StatusChangeEvent,
)
from synthorg.processes import pid_alive
from synthorg.store.codec import NEVER_RAN_OBSERVATION, RESTART_OBSERVATION, now
from synthorg.store.errors import ConversationOwnedError
from synthorg.store.protocol import (
    ConversationStore,
    ExecutionStatus,
    LedgerStore,
    ReconcileReport,
    RunClaimant,
    RunOwner,
)

LEASE_S = 30.0
"""How long an owner's claim lasts without a heartbeat (it renews every third of it)."""

_ACTIVE = (ConversationStatus.RUNNING, ConversationStatus.WAITING_CONFIRMATION)
_PAGE = 500


class OwnedStore(ConversationStore, LedgerStore, Protocol):
    """What reconciliation writes: the conversation, its log, its owner and its ledger rows."""


_RECONCILER = "rec-"
"""The owner ids of reconcilers' claims: held only while they answer and interrupt, never
run, so a run's claim waits them out instead of being refused."""
_RECONCILER_WAIT_S = 10.0


def claimant(*, reconciler: bool = False) -> RunClaimant:
    """A fresh claimant identity for this process (a new owner id per claim)."""
    prefix = _RECONCILER if reconciler else "own-"
    return RunClaimant(
        owner_id=f"{prefix}{secrets.token_hex(8)}", host=socket.gethostname(), pid=os.getpid()
    )


def is_dead(owner: RunOwner) -> bool:
    """The owner can no longer be running the conversation."""
    if owner.expired:
        return True
    return owner.host == socket.gethostname() and not pid_alive(owner.pid)


@dataclass(frozen=True)
class OpenAction:
    """An action of the log without an observation."""

    action_id: str
    never_ran: bool
    """It was awaiting approval and never approved, so it cannot have run."""


async def open_actions(
    store: ConversationStore, conversation_id: str, *, after: int = 0
) -> list[OpenAction]:
    """Actions after seq ``after`` that have no observation, in log order."""
    pending: dict[str, None] = {}
    awaiting: set[str] = set()
    while True:
        batch = await store.history(conversation_id, after=after, limit=_PAGE)
        for stored in batch:
            event = stored.event
            if isinstance(event, ActionEvent):
                pending[event.action_id] = None
            elif isinstance(event, ObservationEvent):
                pending.pop(event.action_id, None)
            elif isinstance(event, ConfirmationRequestEvent):
                awaiting.update(p.action_id for p in event.pending)
            elif isinstance(event, ConfirmationDecisionEvent):
                awaiting.difference_update(event.accepted)
        if len(batch) < _PAGE:
            return [OpenAction(a, a in awaiting) for a in pending]
        after = batch[-1].seq


async def _interrupt(
    store: ConversationStore, record: ConversationRecord, dead: RunOwner | None
) -> list[str]:
    """Answer the open actions and mark the conversation INTERRUPTED (caller owns it)."""
    answered: list[str] = []
    for action in await open_actions(store, record.id):
        await store.append(
            record.id,
            ObservationEvent(
                action_id=action.action_id,
                content=NEVER_RAN_OBSERVATION if action.never_ran else RESTART_OBSERVATION,
                is_error=True,
                non_retryable=not action.never_ran,
            ),
        )
        answered.append(action.action_id)
    who = dead.describe() if dead is not None else "a process that left no owner record"
    reason = (
        f"the process running this conversation ({who}) died; "
        f"resume it with `synthorg run --resume {record.id}`"
    )
    await store.transition(
        record.model_copy(
            update={"status": ConversationStatus.INTERRUPTED, "error": reason, "updated_at": now()}
        ),
        StatusChangeEvent(old=record.status, new=ConversationStatus.INTERRUPTED, reason=reason),
    )
    return answered


async def _close_executions(
    store: OwnedStore, conversation_id: str, holder: RunOwner | None
) -> None:
    """Kill the conversation's executions still open: no run of it is alive now (a run
    closes its own on every exit path it lives through), so their bearers must stay dead."""
    who = holder.describe() if holder is not None else "no owner"
    for row in await store.executions_of(conversation_id):
        if row.status is ExecutionStatus.ACTIVE:
            await store.set_execution_status(
                row.execution_id,
                ExecutionStatus.KILLED,
                f"superseded: the conversation was taken over (its previous owner: {who})",
            )


async def _claim(
    store: OwnedStore, conversation_id: str, me: RunClaimant, lease_s: float
) -> tuple[RunOwner | None, RunOwner]:
    """The previous holder and our claim. A reconciler's claim (a sweep, a reader) lasts only
    while it interrupts the conversation: wait it out, bounded, rather than refuse."""
    deadline = time.monotonic() + _RECONCILER_WAIT_S
    while True:
        holder = await store.conversation_owner(conversation_id)
        displace = holder.owner_id if holder is not None and is_dead(holder) else None
        try:
            owner = await store.claim_conversation(
                conversation_id, me, lease_s=lease_s, displace=displace
            )
        except ConversationOwnedError as exc:
            if not exc.holder.owner_id.startswith(_RECONCILER) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)
            continue
        return holder, owner


async def take_over(
    store: OwnedStore,
    conversation_id: str,
    me: RunClaimant,
    *,
    lease_s: float = LEASE_S,
) -> tuple[RunOwner, list[str]]:
    """Claim the conversation for ``me``, first reconciling what a dead owner left.

    Returns the claim and the action ids that were reconciled. ConversationOwnedError when
    a live process owns it (naming host, pid, since).
    """
    holder, owner = await _claim(store, conversation_id, me, lease_s)
    try:
        # Read after the claim: a reconciler before us may have finished already.
        record = await store.get_conversation(conversation_id)
        await _close_executions(store, conversation_id, holder)
        answered: list[str] = []
        if record.status in _ACTIVE:
            answered = await _interrupt(store, record, holder)
    except BaseException:
        await store.release_conversation(conversation_id, me.owner_id)
        raise
    return owner, answered


async def reconcile_one(
    store: OwnedStore,
    record: ConversationRecord,
    *,
    lease_s: float = LEASE_S,
    ownerless: bool = True,
) -> list[str] | None:
    """Reconcile ``record`` if it is active and its owner is dead (or, with ``ownerless``,
    absent); None when left alone."""
    if record.status not in _ACTIVE:
        return None
    holder = await store.conversation_owner(record.id)
    if holder is None and not ownerless:
        return None
    if holder is not None and not is_dead(holder):
        return None
    me = claimant(reconciler=True)
    try:
        _, answered = await take_over(store, record.id, me, lease_s=lease_s)
    except ConversationOwnedError:
        return None  # a live owner, or another reconciler got there first
    await store.release_conversation(record.id, me.owner_id)
    return answered


async def _active(store: ConversationStore) -> list[ConversationRecord]:
    found: list[ConversationRecord] = []
    for status in _ACTIVE:
        cursor: str | None = None
        while True:
            page = await store.list_conversations(status=status, limit=_PAGE, cursor=cursor)
            found.extend(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    return found


async def reconcile(store: OwnedStore) -> ReconcileReport:
    """Reconcile every active conversation whose owner is dead; live owners are left alone."""
    return await _reconcile(store, ownerless=True)


async def sweep(store: OwnedStore) -> ReconcileReport:
    """Reconcile every active conversation whose owner record shows it dead (lease lapsed,
    or its pid gone on this host): what a live process does periodically. An active
    conversation with no owner record at all is left to ``reconcile`` (a server's start, a
    reader), as a run between its record and its claim may look like that."""
    return await _reconcile(store, ownerless=False)


async def _reconcile(store: OwnedStore, *, ownerless: bool) -> ReconcileReport:
    interrupted: list[str] = []
    reconciled: list[tuple[str, str]] = []
    for record in await _active(store):
        answered = await reconcile_one(store, record, ownerless=ownerless)
        if answered is None:
            continue
        interrupted.append(record.id)
        reconciled.extend((record.id, action_id) for action_id in answered)
    return ReconcileReport(
        conversations_interrupted=tuple(interrupted), actions_reconciled=tuple(reconciled)
    )
