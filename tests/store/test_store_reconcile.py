"""Restart reconciliation: interrupted conversations become error, open tools get an answer."""

from __future__ import annotations

from store_helpers import message, record, uid

from synthorg.domain import (
    ActionEvent,
    ConversationStatus,
    ObservationEvent,
    StatusChangeEvent,
)
from synthorg.store import open_store
from synthorg.store.codec import RESTART_OBSERVATION


def _action(action_id: str) -> ActionEvent:
    return ActionEvent(kind="action", action_id=action_id, tool_name="terminal")


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
        assert set(report.conversations_errored) >= {running.id, waiting.id}
        assert finished.id not in report.conversations_errored
        ours = {pair for pair in report.actions_reconciled if pair[0] in {running.id, waiting.id}}
        assert ours == {(running.id, "a2"), (running.id, "a3"), (waiting.id, "w1")}

        for rec in (running, waiting):
            after = await store.get_conversation(rec.id)
            assert after.status is ConversationStatus.ERROR
            assert after.error
        assert (await store.get_conversation(finished.id)).status is ConversationStatus.FINISHED

        tail = [s.event for s in await store.history(running.id, after=5)]
        observations = [e for e in tail if isinstance(e, ObservationEvent)]
        assert [o.action_id for o in observations] == ["a2", "a3"]
        assert all(o.is_error and o.non_retryable for o in observations)
        assert all(o.content == RESTART_OBSERVATION for o in observations)
        change = tail[-1]
        assert isinstance(change, StatusChangeEvent)
        assert change.old is ConversationStatus.RUNNING
        assert change.new is ConversationStatus.ERROR
        assert len(await store.history(finished.id)) == 1

        # a second pass finds nothing left to do
        again = await store.reconcile_after_restart()
        assert not {running.id, waiting.id} & set(again.conversations_errored)
    finally:
        await store.close()
