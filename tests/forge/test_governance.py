"""Governance and feedback through the real app: the daily cap refuses a trigger once the day's
triggered runs spent it, a failed check on the run's own PR resumes the same conversation up to
the CI-round cap, a review resumes it with the review's text, and a project runs at most
``max_concurrent`` triggered runs at once."""

from __future__ import annotations

import copy

import pytest

from synthorg.domain.events import CancelEvent
from synthorg.store.protocol import DeliveryState

from .conftest import Forge, example, messages_of, on_pull


async def _labelled_run(forge: Forge, delivery: str, issue: int = 1) -> str:
    labeled = copy.deepcopy(example("issues.labeled"))
    labeled["issue"]["number"] = issue
    await forge.deliver("issues", labeled, delivery=delivery)
    settled = await forge.settled(delivery)
    assert settled.state is DeliveryState.STARTED, settled.outcome
    assert settled.conversation_id is not None
    return settled.conversation_id


@pytest.mark.parametrize("project_overrides", [{"daily_cap_usd": "0.000001"}])
async def test_a_trigger_past_the_daily_cap_is_refused(forge: Forge) -> None:
    conversation = await _labelled_run(forge, "g-1")
    result = await forge.components.service.wait(conversation)
    assert result is not None and sum(t.cost_usd for t in result.turns) > 0
    labeled = copy.deepcopy(example("issues.labeled"))
    labeled["issue"]["number"] = 2
    await forge.deliver("issues", labeled, delivery="g-2")
    refused = await forge.settled("g-2")
    assert refused.state is DeliveryState.REFUSED
    assert refused.outcome.startswith("daily cap reached: ")
    assert await forge.store.count_conversations() == 1


@pytest.mark.parametrize("project_overrides", [{"max_ci_rounds": 1}])
async def test_failed_checks_resume_the_run_up_to_the_cap(forge: Forge) -> None:
    conversation = await _labelled_run(forge, "g-3")
    await forge.components.service.wait(conversation)
    await forge.deliver("check_run", on_pull("check_run.completed", conversation), delivery="k-1")
    resumed = await forge.settled("k-1")
    assert (resumed.state, resumed.conversation_id) == (DeliveryState.STARTED, conversation)
    assert resumed.issue == 2
    assert "check run Octocoders-linter failure" in "\n".join(
        await messages_of(forge, conversation)
    )
    await forge.components.service.wait(conversation)
    await forge.deliver("check_run", on_pull("check_run.completed", conversation), delivery="k-2")
    capped = await forge.settled("k-2")
    assert capped.state is DeliveryState.REFUSED
    assert capped.outcome == "CI-feedback cap reached (1 of 1 rounds)"


async def test_a_review_resumes_the_run_with_its_text(forge: Forge) -> None:
    conversation = await _labelled_run(forge, "g-4")
    await forge.components.service.wait(conversation)
    review = on_pull("pull_request_review.submitted", conversation)
    review["review"]["body"] = "Please also update the changelog."
    await forge.deliver("pull_request_review", review, delivery="r-1")
    resumed = await forge.settled("r-1")
    assert (resumed.state, resumed.conversation_id) == (DeliveryState.STARTED, conversation)
    assert "Please also update the changelog." in "\n".join(await messages_of(forge, conversation))


async def test_feedback_on_a_pull_request_that_is_not_a_run_s_starts_nothing(
    forge: Forge,
) -> None:
    # The example's check ran on branch "changes": not a synthorg/ branch, of no interest.
    answer = await forge.deliver("check_run", example("check_run.completed"), delivery="k-3")
    assert answer.json()["queued"] is False
    unknown = on_pull("check_run.completed", "conv-unknown")
    await forge.deliver("check_run", unknown, delivery="k-4")
    assert (await forge.settled("k-4")).state is DeliveryState.SKIPPED


@pytest.mark.parametrize("project_overrides", [{"max_concurrent": 1, "model": "slow50"}])
async def test_a_second_run_waits_for_the_first_to_end(forge: Forge) -> None:
    first = await _labelled_run(forge, "g-5", issue=1)
    labeled = copy.deepcopy(example("issues.labeled"))
    labeled["issue"]["number"] = 2
    await forge.deliver("issues", labeled, delivery="g-6")
    await forge.components.service.cancel(first, by="test")
    await forge.components.service.wait(first)
    second = await forge.settled("g-6")
    assert second.state is DeliveryState.STARTED and second.conversation_id != first
    cancelled = [
        e.timestamp
        for e in await forge.store.history(first, limit=1000)
        if isinstance(e.event, CancelEvent)
    ]
    # It was started only once the first had been stopped, never beside it.
    assert cancelled and second.updated_at >= cancelled[0]


async def test_a_failed_workflow_run_on_the_run_s_branch_resumes_it(forge: Forge) -> None:
    conversation = await _labelled_run(forge, "g-7")
    await forge.components.service.wait(conversation)
    run = copy.deepcopy(example("workflow_run.completed"))
    run["workflow_run"] |= {
        "conclusion": "failure",
        "head_branch": f"synthorg/{conversation}",
        "name": "CI",
    }
    await forge.deliver("workflow_run", run, delivery="w-1")
    resumed = await forge.settled("w-1")
    assert (resumed.state, resumed.conversation_id) == (DeliveryState.STARTED, conversation)
    assert "workflow run CI failure" in "\n".join(await messages_of(forge, conversation))
    passed = copy.deepcopy(example("check_suite.completed"))  # conclusion success: no interest
    assert (await forge.deliver("check_suite", passed, delivery="w-2")).json()["queued"] is False
