"""What a resumed run must tell its model that the model's own history does not have yet.

One rule for every loop: a user message logged while no run was active has reached no loop
(a message logged during a run was steered into it, even when that run later died without
an inactive status); an action the host answered itself (cut short, or reconciled after a
crash) carries that answer, which a runtime with its own persisted history must add.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from synthorg.domain import StoredEvent


def undelivered_messages(prior: Sequence[StoredEvent]) -> tuple[str, ...]:
    """User messages logged since the last run started, while no run was active."""
    messages: list[str] = []
    active = False
    for stored in prior:
        event = stored.event
        if event.kind == "status_change":
            if event.new.is_active and not active:
                messages.clear()  # the run that started here was given them
            active = event.new.is_active
        elif event.kind == "message" and event.role == "user" and not active:
            messages.append(event.text)
    return tuple(messages)


def host_answers(prior: Sequence[StoredEvent]) -> Mapping[str, str]:
    """Action id -> the observation the host wrote itself ("effect unknown", not executed).

    These never came from a runtime, so a runtime that resumes its own persisted history
    must add them, paired with their calls, before anything else.
    """
    return {
        stored.event.action_id: stored.event.content
        for stored in prior
        if stored.event.kind == "observation" and stored.event.non_retryable
    }
