"""A run's ownership of its conversation: claimed at start, kept alive by a heartbeat, released.

The rule itself (who is dead, what reconciliation writes) lives in ``synthorg.store.reconcile``;
this module ties it to a run's lifetime, to the commands that read conversations, and to the
periodic sweep of a live process (``sweep_dead_owners``). The heartbeat also renews the run's
execution's lease in the ledger, so a run's bearer dies with the lease, read by no one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from synthorg.domain import ConversationRecord
from synthorg.errors import BoundaryError
from synthorg.logging import get_logger
from synthorg.store.errors import LeaseLostError
from synthorg.store.fence import fenced
from synthorg.store.protocol import ConversationPage, ConversationStore, RunOwner
from synthorg.store.reconcile import (
    LEASE_S,
    OwnedStore,
    claimant,
    reconcile_one,
    sweep,
    take_over,
)

_log = get_logger("synthorg.ownership")


@dataclass(frozen=True)
class OwnershipPolicy:
    """How a process owns its runs: the lease, and whether its writes are fenced."""

    lease_s: float = LEASE_S
    """Without a renewal for this long, another process may take the conversation over."""
    fence: bool = False
    """Refuse this process's writes for a run once another owner holds it (store.fence)."""


@dataclass(frozen=True)
class RunOwnership:
    """This process's claim on one conversation."""

    store: ConversationStore
    owner: RunOwner
    conversation_id: str
    lease_s: float = LEASE_S
    fence: bool = False
    """Refuse this run's writes once another owner holds the conversation (store.fence)."""

    async def hold[T](self, run: Coroutine[Any, Any, T]) -> T:
        """Await ``run`` while heartbeating; release the claim however it ends."""
        async with self.held():
            return await run

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Heartbeat for the body's lifetime (a lost lease stops the body); release after."""
        fence = fenced(self.owner.owner_id) if self.fence else contextlib.nullcontext()
        try:
            with fence:
                async with asyncio.TaskGroup() as group:
                    beat = group.create_task(self._heartbeat(), name="ownership-heartbeat")
                    try:
                        yield
                    finally:
                        beat.cancel()
        except BaseExceptionGroup as failed:
            # The body's own error (or the lost lease) surfaces as itself, not as a group.
            if len(failed.exceptions) == 1:
                raise failed.exceptions[0] from None
            raise
        finally:
            await asyncio.shield(self.release())

    async def release(self) -> None:
        """Give the conversation up (a no-op if someone else holds it now)."""
        try:
            await self.store.release_conversation(self.conversation_id, self.owner.owner_id)
        except BoundaryError as exc:
            # The lease then runs out by itself, or the pid check frees it at once.
            _log.warning(
                "OWNERSHIP_RELEASE_FAILED", conversation_id=self.conversation_id, error=str(exc)
            )

    async def _heartbeat(self) -> None:
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                kept = await self.store.renew_claim(
                    self.conversation_id, self.owner.owner_id, lease_s=self.lease_s
                )
            except BoundaryError as exc:
                if time.monotonic() - renewed < self.lease_s:
                    _log.warning(
                        "OWNERSHIP_RENEW_FAILED",
                        conversation_id=self.conversation_id,
                        error=str(exc),
                    )
                    continue
                kept = False
            if not kept:
                raise LeaseLostError(
                    f"this process lost conversation {self.conversation_id}: its lease of "
                    f"{self.lease_s:g} s could not be renewed and another process may have taken "
                    "it over; this run stops here"
                )
            renewed = time.monotonic()


async def claim_run(
    store: OwnedStore,
    conversation_id: str,
    *,
    lease_s: float = LEASE_S,
    fence: bool = False,
) -> RunOwnership:
    """Own the conversation for a run, reconciling first what a dead owner left behind.

    ConversationOwnedError (naming host, pid, since) when a live process runs it.
    """
    owner, answered = await take_over(store, conversation_id, claimant(), lease_s=lease_s)
    if answered:
        _log.info("CONVERSATION_RECONCILED", conversation_id=conversation_id, actions=answered)
    return RunOwnership(store, owner, conversation_id, lease_s, fence)


async def reconciled(store: OwnedStore, record: ConversationRecord) -> ConversationRecord:
    """The record as it stands once a dead owner's leftovers are reconciled."""
    if await reconcile_one(store, record) is None:
        return record
    return await store.get_conversation(record.id)


async def reconciled_page(store: OwnedStore, page: ConversationPage) -> ConversationPage:
    """The page with each conversation of a dead owner reconciled."""
    items = tuple([await reconciled(store, record) for record in page.items])
    return page.model_copy(update={"items": items})


async def sweep_dead_owners(store: OwnedStore, every_s: float) -> None:
    """Reconcile the runs of dead owners now and then every ``every_s`` (a live process's
    share of the rule: a killed run leaves ``running`` with nobody reading it). Runs until
    cancelled; a failed sweep is logged and retried at the next tick."""
    while True:
        try:
            report = await sweep(store)
        except Exception as exc:  # the store is down or busy: the next tick tries again
            _log.warning("OWNERSHIP_SWEEP_FAILED", error=f"{type(exc).__name__}: {exc}")
        else:
            if report.conversations_interrupted:
                _log.info(
                    "OWNERSHIP_SWEPT",
                    conversations_interrupted=list(report.conversations_interrupted),
                    actions_reconciled=len(report.actions_reconciled),
                )
        await asyncio.sleep(every_s)
