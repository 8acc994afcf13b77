"""Reconciliation: a dead owner's active conversations become interrupted; tools answered once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from store_helpers import message, record, uid

from synthorg.domain import (
    ActionEvent,
    ConfirmationDecisionEvent,
    ConfirmationRequestEvent,
    ConversationStatus,
    ObservationEvent,
    PendingAction,
    StatusChangeEvent,
)
from synthorg.store import RunClaimant, Store, open_store
from synthorg.store.codec import NEVER_RAN_OBSERVATION, RESTART_OBSERVATION
from synthorg.store.reconcile import claimant, reconcile, reconcile_one, take_over


def _action(action_id: str) -> ActionEvent:
    return ActionEvent(kind="action", action_id=action_id, tool_name="terminal")


def _dead_pid() -> int:
    """The pid of a process of this host that has exited and been reaped."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(proc.stdout)


async def test_reconcile_after_restart(store_url: str) -> None:
    project = uid("p")
    running = record(project_id=project, status=ConversationStatus.RUNNING)
    waiting = record(project_id=project, status=ConversationStatus.WAITING_CONFIRMATION)
    finished = record(project_id=project, status=ConversationStatus.FINISHED)
    store = await open_store(store_url)
    for rec in (running, waiting, finished):
        await store.create_conversation(rec)
    await store.append(running.id, _action("a1"))
    await store.append(running.id, ObservationEvent(action_id="a1", content="ok"))
    await store.append(running.id, _action("a2"))
    await store.append(running.id, message(1))
    await store.append(running.id, _action("a3"))
    await store.append(waiting.id, _action("w1"))
    await store.append(finished.id, _action("f1"))  # not interrupted: left alone
    await store.close()  # "the server died"

    store = await open_store(store_url)
    try:
        report = await store.reconcile_after_restart()
        assert set(report.conversations_interrupted) >= {running.id, waiting.id}
        assert finished.id not in report.conversations_interrupted
        ours = {pair for pair in report.actions_reconciled if pair[0] in {running.id, waiting.id}}
        assert ours == {(running.id, "a2"), (running.id, "a3"), (waiting.id, "w1")}

        for rec in (running, waiting):
            after = await store.get_conversation(rec.id)
            assert after.status is ConversationStatus.INTERRUPTED
            assert after.error
            assert await store.conversation_owner(rec.id) is None  # the reconciler let go
        assert (await store.get_conversation(finished.id)).status is ConversationStatus.FINISHED

        tail = [s.event for s in await store.history(running.id, after=5)]
        observations = [e for e in tail if isinstance(e, ObservationEvent)]
        assert [o.action_id for o in observations] == ["a2", "a3"]
        assert all(o.is_error and o.non_retryable for o in observations)
        assert all(o.content == RESTART_OBSERVATION for o in observations)
        change = tail[-1]
        assert isinstance(change, StatusChangeEvent)
        assert change.old is ConversationStatus.RUNNING
        assert change.new is ConversationStatus.INTERRUPTED
        assert len(await store.history(finished.id)) == 1

        # a second pass finds nothing left to do
        again = await store.reconcile_after_restart()
        assert not {running.id, waiting.id} & set(again.conversations_interrupted)
    finally:
        await store.close()


async def test_a_live_owner_is_left_alone_and_a_dead_pid_is_dead_at_once(store: Store) -> None:
    live = record(status=ConversationStatus.RUNNING)
    dead = record(status=ConversationStatus.RUNNING)
    for rec in (live, dead):
        await store.create_conversation(rec)
        await store.append(rec.id, _action("x"))
    me = claimant()
    await store.claim_conversation(live.id, me, lease_s=600)
    ghost = RunClaimant(owner_id=uid("own"), host=me.host, pid=_dead_pid())
    await store.claim_conversation(dead.id, ghost, lease_s=600)  # lease far from expiry

    assert await reconcile_one(store, await store.get_conversation(live.id)) is None
    assert (await store.get_conversation(live.id)).status is ConversationStatus.RUNNING
    assert await reconcile_one(store, await store.get_conversation(dead.id)) == ["x"]
    after = await store.get_conversation(dead.id)
    assert after.status is ConversationStatus.INTERRUPTED
    assert after.error is not None and f"pid {ghost.pid}" in after.error


async def test_another_hosts_owner_is_dead_only_when_its_lease_ran_out(store: Store) -> None:
    rec = record(status=ConversationStatus.RUNNING)
    await store.create_conversation(rec)
    far = RunClaimant(owner_id=uid("own"), host="elsewhere.example", pid=os.getpid())
    await store.claim_conversation(rec.id, far, lease_s=600)
    assert await reconcile_one(store, rec) is None
    # Its heartbeat stops: a lease of zero has run out by the next read.
    assert await store.renew_claim(rec.id, far.owner_id, lease_s=0)
    assert await reconcile_one(store, rec) == []
    assert (await store.get_conversation(rec.id)).status is ConversationStatus.INTERRUPTED


async def test_an_action_awaiting_approval_never_ran(store: Store) -> None:
    rec = record(status=ConversationStatus.WAITING_CONFIRMATION)
    await store.create_conversation(rec)
    for action_id in ("ran", "approved", "waiting"):
        await store.append(rec.id, _action(action_id))
    await store.append(
        rec.id,
        ConfirmationRequestEvent(
            pending=(
                PendingAction(action_id="approved", tool_name="terminal"),
                PendingAction(action_id="waiting", tool_name="terminal"),
            )
        ),
    )
    await store.append(rec.id, ConfirmationDecisionEvent(accepted=("approved",), approver="ops"))
    assert await reconcile_one(store, rec) == ["ran", "approved", "waiting"]
    answers = {
        s.event.action_id: s.event
        for s in await store.history(rec.id, kinds=frozenset({"observation"}))
        if isinstance(s.event, ObservationEvent)
    }
    assert answers["waiting"].content == NEVER_RAN_OBSERVATION
    assert not answers["waiting"].non_retryable
    for action_id in ("ran", "approved"):
        assert answers[action_id].content == RESTART_OBSERVATION
        assert answers[action_id].non_retryable


async def test_concurrent_reconcilers_answer_each_action_once(store_url: str) -> None:
    rec = record(status=ConversationStatus.RUNNING)
    stores = [await open_store(store_url) for _ in range(4)]
    try:
        await stores[0].create_conversation(rec)
        for i in range(5):
            await stores[0].append(rec.id, _action(f"a{i}"))
        # Four processes' worth of stores, each with several reconcilers, all at once.
        runs = [reconcile(s) for s in stores for _ in range(3)]
        runs += [take_over(s, rec.id, claimant()) for s in stores]
        await asyncio.gather(*runs, return_exceptions=True)
        events = [s.event for s in await stores[0].history(rec.id, limit=1000)]
        observed = [e.action_id for e in events if isinstance(e, ObservationEvent)]
        assert sorted(observed) == [f"a{i}" for i in range(5)]
        changes = [e for e in events if isinstance(e, StatusChangeEvent)]
        assert [(c.old, c.new) for c in changes] == [
            (ConversationStatus.RUNNING, ConversationStatus.INTERRUPTED)
        ]
    finally:
        for s in stores:
            await s.close()
