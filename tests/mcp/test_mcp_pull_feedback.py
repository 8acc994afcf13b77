"""The run's own pull request after it is open: reviews, CI status with failed logs, comments.

Against the loopback forge (GitHub's REST shapes); every tool is scoped to the pull request
whose head is the run's branch in the configured repository.
"""

from __future__ import annotations

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_world import (
    BRANCH,
    CONVERSATION,
    FORGE_TOKEN,
    GIT_TOKEN,
    OTHER_CONVERSATION,
    OwnPull,
    World,
    call,
)

from synthorg.mcp import McpEndpoints


async def test_reads_the_reviews_and_comments_of_its_own_pull_request(
    world: World, endpoints: McpEndpoints, own_pull: OwnPull
) -> None:
    number = own_pull.number
    forge = world.forge_state
    forge.reviews[number] = [
        {"user": {"login": "ana"}, "state": "CHANGES_REQUESTED", "body": "Please add a test."}
    ]
    forge.review_comments[number] = [
        {"user": {"login": "ana"}, "path": "src/x.py", "line": 12, "body": "Off by one here."}
    ]
    forge.issue_comments[number] = [{"user": {"login": "bo"}, "body": f"token {FORGE_TOKEN}?"}]
    result = await call(endpoints, world.bearer(), "pull_request_reviews", {})
    assert not result.is_error, result.text
    assert result.text.splitlines() == [
        f"pull request #{number} (open): Work",
        "review by ana [CHANGES_REQUESTED]: Please add a test.",
        "comment by ana on src/x.py:12: Off by one here.",
        "conversation comment by bo: token [REDACTED]?",
    ]
    named = await call(endpoints, world.bearer(), "pull_request_reviews", {"pull_number": number})
    assert named.text == result.text


async def test_reads_ci_status_checks_and_the_failed_jobs_log(
    world: World, endpoints: McpEndpoints, own_pull: OwnPull
) -> None:
    forge, sha = world.forge_state, own_pull.head_sha
    forge.seed_ci(
        sha,
        "failure",
        [("lint", "success", "clean")],
        [
            (71, "unit", "completed", "failure"),
            (72, "build", "completed", "success"),
            (73, "e2e", "in_progress", None),
        ],
    )
    forge.job_logs[71] = "setup ok\n" + "noise\n" * 5000 + f"AssertionError: {GIT_TOKEN}\nFAILED\n"
    result = await call(endpoints, world.bearer(), "ci_status", {})
    assert not result.is_error, result.text
    lines = result.text.splitlines()
    assert lines[:6] == [
        f"pull request #{own_pull.number} head {sha[:12]}: combined status failure",
        "status lint: success clean",
        "check unit: completed failure",
        "check build: completed success",
        "check e2e: in_progress",
        "--- log of failed job unit (last 16000 bytes)",
    ]
    assert lines[-2:] == ["AssertionError: [REDACTED]", "FAILED"]
    assert "setup ok" not in result.text  # only the end of a long log
    # The log blob was fetched without the token (it is a signed URL on GitHub).
    assert forge.blob_auth_headers == [""]


async def test_a_log_whose_redirect_is_refused_is_skipped_and_the_rest_returned(
    world: World, endpoints: McpEndpoints, own_pull: OwnPull
) -> None:
    forge, sha = world.forge_state, own_pull.head_sha
    forge.seed_ci(
        sha,
        "failure",
        [("lint", "failure", "2 problems")],
        [
            (91, "unit", "completed", "failure"),
            (92, "e2e", "completed", "failure"),
        ],
    )
    forge.job_logs[91] = "never fetched"
    forge.job_log_locations[91] = "http://logs.elsewhere.test/job-91.log"  # not https, foreign
    forge.job_logs[92] = "e2e setup\nTimeoutError in test_login\n"
    result = await call(endpoints, world.bearer(), "ci_status", {})
    assert not result.is_error, result.text
    assert result.text.splitlines() == [
        f"pull request #{own_pull.number} head {sha[:12]}: combined status failure",
        "status lint: failure 2 problems",
        "check unit: completed failure",
        "check e2e: completed failure",
        "--- log of failed job unit (last 16000 bytes)",
        "(log skipped: the forge redirected to 'http://logs.elsewhere.test/job-91.log', "
        "which is not https)",
        "--- log of failed job e2e (last 16000 bytes)",
        "e2e setup",
        "TimeoutError in test_login",
    ]
    assert forge.blob_auth_headers == [""]  # only the good log was fetched, without the token


async def test_comments_on_its_own_pull_request(
    world: World, endpoints: McpEndpoints, own_pull: OwnPull
) -> None:
    number = own_pull.number
    result = await call(
        endpoints, world.bearer(), "comment_on_pull_request", {"body": "Fixed in the last push."}
    )
    assert not result.is_error, result.text
    assert result.text == f"commented on pull request #{number}: https://forge.test/c/{number}-1"
    assert [c["body"] for c in world.forge_state.issue_comments[number]] == [
        "Fixed in the last push."
    ]
    events = await world.audit.log(CONVERSATION)
    assert [(e.tool, e.outcome) for e in events][-2:] == [
        ("comment_on_pull_request", "started"),
        ("comment_on_pull_request", "ok"),
    ]


@pytest.mark.parametrize(
    "tool_args",
    [
        ("pull_request_reviews", {}),
        ("ci_status", {}),
        ("comment_on_pull_request", {"body": "hi"}),
    ],
)
async def test_another_runs_or_a_forks_pull_request_is_refused(
    world: World, endpoints: McpEndpoints, tool_args: tuple[str, dict[str, object]]
) -> None:
    tool, arguments = tool_args
    forge = world.forge_state
    other = forge.add_pull(f"synthorg/{OTHER_CONVERSATION}")
    fork = forge.add_pull(BRANCH, repo="mallory/widgets")  # same branch name, other repo
    forge.reviews[other] = [{"user": {"login": "x"}, "state": "COMMENTED", "body": "theirs"}]
    for number in (other, fork, 999):
        result = await call(endpoints, world.bearer(), tool, {**arguments, "pull_number": number})
        assert result.is_error, result.text
        assert "is not this run's" in result.text or "does not exist" in result.text
    # Without a number: the fork's pull request is not the run's either.
    found = await call(endpoints, world.bearer(), tool, arguments)
    assert found.is_error and "has no pull request yet" in found.text
    assert "theirs" not in found.text
    assert forge.issue_comments == {}
    assert not any("/reviews" in r or "/comments" in r or "/status" in r for r in forge.requests)


async def test_another_projects_bearer_reads_nothing(world: World, endpoints: McpEndpoints) -> None:
    beta = world.bearer(project="beta", conversation="conv-beta-1")
    result = await call(endpoints, beta, "ci_status", {"project_id": "alpha"})
    assert result.is_error and "scoped to project 'beta'" in result.text
    own = await call(endpoints, beta, "ci_status", {})
    assert own.is_error and "not configured for project 'beta'" in own.text
    assert world.forge_state.auth_headers == []


async def test_the_handshake_names_the_server_and_each_tool_is_annotated(
    world: World, endpoints: McpEndpoints
) -> None:
    assert endpoints.url is not None
    headers = {"Authorization": f"Bearer {world.bearer()}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(endpoints.url, http_client=http), mode="legacy") as client,
    ):
        info = client.server_info
        listed = await client.list_tools()
    assert info is not None and info.name == "synthorg-credentialed-tools"
    assert info.version and info.version[0].isdigit()
    hints = {
        t.name: (
            t.annotations.read_only_hint,
            t.annotations.destructive_hint,
            t.annotations.idempotent_hint,
        )
        for t in listed.tools
        if t.annotations is not None
    }
    assert hints == {
        "git_push": (False, False, True),
        "open_pull_request": (False, False, False),
        "pull_request_reviews": (True, False, True),
        "ci_status": (True, False, True),
        "comment_on_pull_request": (False, False, False),
        "http_fetch": (True, False, True),
    }
