"""A decision as REST and the local socket read it: one conversion to the engine's Decision,
which holds the one rule (domain.events.decided_both) for an id accepted and rejected at once."""

from __future__ import annotations

import pytest

from synthorg.engine.control import Decision
from synthorg.errors import UsageError
from synthorg.server.local import DecisionBody
from synthorg.server.wire import DecisionRequest


def test_an_id_both_accepted_and_rejected_is_refused_by_both_bodies() -> None:
    rest = DecisionRequest(accepted=["act-a", "act-b"], rejected=["act-b"])
    local = DecisionBody(accepted=["act-a", "act-b"], rejected=["act-b"], approver="cli-user")
    for refused in (lambda: rest.decision("abe"), lambda: local.decision(local.approver)):
        with pytest.raises(UsageError, match=r"both accepted and rejected: \['act-b'\]"):
            refused()


def test_a_decision_keeps_its_ids_its_reason_and_who_decided() -> None:
    body = DecisionRequest(accepted=["act-a", "act-a"], rejected=["act-b"], reason="fine")
    assert body.decision("abe") == Decision(
        accepted=frozenset({"act-a"}), rejected=frozenset({"act-b"}), approver="abe", reason="fine"
    )
