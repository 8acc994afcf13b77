"""Triggers and the author policy through the real app: a `/synthorg` comment by an allowed
author starts a run with its instructions, anyone else's starts nothing (refused, no comment
posted), a second trigger on the same issue continues the same conversation."""

from __future__ import annotations

from typing import Any

import pytest

from synthorg.domain.events import ToolAuditEvent
from synthorg.store.protocol import DeliveryState

from .conftest import Forge, example, messages_of


def comment(body: str, association: str = "OWNER", login: str = "Codertocat") -> dict[str, Any]:
    """The example issue comment with its body, author association and author changed."""
    data = example("issue_comment.created")
    data["comment"]["body"] = body
    data["comment"]["author_association"] = association
    data["comment"]["user"]["login"] = login
    return data


async def test_a_command_by_the_owner_starts_a_run_with_its_instructions(forge: Forge) -> None:
    answer = await forge.deliver(
        "issue_comment", comment("/synthorg fix the typo\nin README.md"), delivery="c-1"
    )
    assert answer.status_code == 202 and answer.json()["queued"] is True
    settled = await forge.settled("c-1")
    assert settled.state is DeliveryState.STARTED, settled.outcome
    assert settled.conversation_id is not None
    prompt = (await forge.store.get_conversation(settled.conversation_id)).task.prompt
    assert "Comment by Codertocat:\nfix the typo\nin README.md\n</untrusted-forge-input>" in prompt


async def test_a_comment_without_the_command_is_of_no_interest(forge: Forge) -> None:
    answer = await forge.deliver("issue_comment", comment("thanks! /synthorg"), delivery="c-2")
    assert answer.status_code == 202 and answer.json()["queued"] is False


async def test_a_command_by_someone_not_allowed_starts_nothing(forge: Forge) -> None:
    stranger = comment("/synthorg delete everything", association="NONE", login="mallory")
    await forge.deliver("issue_comment", stranger, delivery="c-3")
    settled = await forge.settled("c-3")
    assert settled.state is DeliveryState.REFUSED
    assert settled.outcome == "mallory: author_association NONE"
    assert settled.conversation_id is None
    assert await forge.store.count_conversations() == 0


@pytest.mark.parametrize("project_overrides", [{"allow_authors": ("friend",)}])
async def test_an_allow_listed_author_may_trigger_whatever_the_association(
    forge: Forge,
) -> None:
    await forge.deliver(
        "issue_comment", comment("/synthorg go", association="NONE", login="friend"), delivery="c-4"
    )
    assert (await forge.settled("c-4")).state is DeliveryState.STARTED


async def test_a_second_trigger_on_the_issue_continues_its_conversation(forge: Forge) -> None:
    await forge.deliver("issues", example("issues.labeled"), delivery="l-1")
    first = await forge.settled("l-1")
    assert first.conversation_id is not None
    await forge.components.service.wait(first.conversation_id)
    await forge.deliver("issue_comment", comment("/synthorg also fix the title"), delivery="c-5")
    second = await forge.settled("c-5")
    assert (second.state, second.conversation_id) == (DeliveryState.STARTED, first.conversation_id)
    assert second.outcome == "run resumed"
    assert "also fix the title" in "\n".join(await messages_of(forge, first.conversation_id))
    assert await forge.store.count_conversations() == 1


async def test_a_refusal_on_an_issue_with_a_conversation_is_in_its_log(forge: Forge) -> None:
    await forge.deliver("issues", example("issues.labeled"), delivery="l-2")
    conversation = (await forge.settled("l-2")).conversation_id
    assert conversation is not None
    await forge.components.service.wait(conversation)
    stranger = comment("/synthorg push to main", association="NONE", login="mallory")
    await forge.deliver("issue_comment", stranger, delivery="c-6")
    refused = await forge.settled("c-6")
    assert (refused.state, refused.conversation_id) == (DeliveryState.REFUSED, conversation)
    audits = [
        e.event
        for e in await forge.store.history(conversation, kinds=frozenset({"tool_audit"}))
        if isinstance(e.event, ToolAuditEvent)
    ]
    assert [(a.tool, a.outcome, a.arguments["delivery"]) for a in audits] == [
        ("forge.trigger", "ok", "l-2"),
        ("forge.trigger", "refused", "c-6"),
    ]
    assert "push to main" not in "\n".join(await messages_of(forge, conversation))
