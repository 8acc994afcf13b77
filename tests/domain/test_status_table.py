"""The one transition table, and that both stores refuse a move outside it."""

from __future__ import annotations

import pytest

from synthorg.domain import ConversationStatus as S
from synthorg.domain import StatusChangeEvent
from synthorg.errors import UsageError
from synthorg.store.codec import check_transition
from tests.store.store_helpers import record


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.RUNNING, S.CREATED),
        (S.FINISHED, S.CREATED),
        (S.PAUSED, S.WAITING_CONFIRMATION),
        (S.CREATED, S.WAITING_CONFIRMATION),
        (S.FINISHED, S.INTERRUPTED),
        (S.PAUSED, S.INTERRUPTED),
    ],
)
def test_moves_outside_the_table_are_refused(old: S, new: S) -> None:
    assert not old.may_become(new)
    with pytest.raises(UsageError, match="may not become"):
        check_transition(
            record().model_copy(update={"status": new}), StatusChangeEvent(old=old, new=new)
        )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.CREATED, S.RUNNING),
        (S.RUNNING, S.WAITING_CONFIRMATION),
        (S.WAITING_CONFIRMATION, S.RUNNING),
        (S.RUNNING, S.INTERRUPTED),
        (S.WAITING_CONFIRMATION, S.INTERRUPTED),
        (S.INTERRUPTED, S.RUNNING),
        (S.FINISHED, S.RUNNING),
        (S.CREATED, S.FAILED),
        (S.PAUSED, S.CANCELLED),
    ],
)
def test_moves_in_the_table_pass(old: S, new: S) -> None:
    assert old.may_become(new)
    check_transition(
        record().model_copy(update={"status": new}), StatusChangeEvent(old=old, new=new)
    )


def test_ended_and_active_are_disjoint_and_named_once() -> None:
    ended = {s for s in S if s.is_ended}
    active = {s for s in S if s.is_active}
    assert ended == {S.FINISHED, S.FAILED, S.CANCELLED, S.ERROR}
    assert active == {S.RUNNING, S.WAITING_CONFIRMATION}
