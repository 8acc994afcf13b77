"""A forge that echoes pieces of its token: no run of 8 of its characters reaches anyone.

Through the real tools against the loopback forge: prefixes, suffixes, middles and the token
spaced out, in review bodies, comments, commit statuses and a failed job's log. Neither the
tool result, nor the audit events in the store, nor the log lines carry any of it.
"""

from __future__ import annotations

import json
import re

import pytest
import structlog
from mcp_world import CONVERSATION, FORGE_TOKEN, GIT_TOKEN, OwnPull, World, call

from synthorg.mcp import McpClientError, McpEndpoints
from synthorg.mcp.redact import REDACTED


def _echoes(token: str) -> list[str]:
    """The pieces seen in the wild: 12-char prefix and suffix, a 20-char middle, spaced out."""
    return [
        f"Validation failed for token {token[:12]}…; tail {token[-12:]}",
        f"middle {token[6:26]} end",
        "spaced " + " ".join(token[3:23]),
        "chunked " + " ".join(token[i : i + 5] for i in range(0, 30, 5)),
    ]


def _runs(text: str) -> list[str]:
    """Every 8-character run of either token in ``text`` (single whitespace joined first)."""
    joined = re.sub(r"(?<=\S)\s(?=\S)", "", text.replace(REDACTED, "\x00"))
    return [
        token[i : i + 8]
        for token in (GIT_TOKEN, FORGE_TOKEN)
        for i in range(len(token) - 7)
        if token[i : i + 8] in joined
    ]


async def _no_fragment_anywhere(
    world: World, text: str, structured: list[dict[str, object]]
) -> None:
    assert _runs(text) == [], text
    details = [e.detail for e in await world.audit.log(CONVERSATION)]
    assert any(REDACTED in d for d in details)  # the echoes reached the audit, redacted
    for detail in details:
        assert _runs(detail) == [], detail
    logged = [str(entry.get("detail", "")) for entry in structured]
    assert any(REDACTED in line for line in logged)
    for line in logged:
        assert _runs(line) == [], line


async def test_pull_request_reviews_pass_no_piece_of_the_token(
    world: World, endpoints: McpEndpoints, own_pull: OwnPull
) -> None:
    number = own_pull.number
    echoes = _echoes(FORGE_TOKEN)
    forge = world.forge_state
    forge.reviews[number] = [
        {"user": {"login": "bot"}, "state": "COMMENTED", "body": echoes[0]},
    ]
    forge.review_comments[number] = [
        {"user": {"login": "bot"}, "path": "a.py", "line": 1, "body": echoes[1]},
    ]
    forge.issue_comments[number] = [
        {"user": {"login": "bot"}, "body": body} for body in (echoes[2], echoes[3])
    ]
    with structlog.testing.capture_logs() as structured:
        result = await call(endpoints, world.bearer(), "pull_request_reviews", {})
    assert not result.is_error, result.text
    assert "Validation failed for token" in result.text and "spaced" in result.text
    await _no_fragment_anywhere(world, result.text, structured)


async def test_ci_status_passes_no_piece_of_either_token(
    world: World, endpoints: McpEndpoints, own_pull: OwnPull
) -> None:
    forge, sha = world.forge_state, own_pull.head_sha
    forge.seed_ci(
        sha,
        "failure",
        [("lint", "failure", f"token {FORGE_TOKEN[:20]}")],
        [
            (81, "unit", "completed", "failure"),
        ],
    )
    forge.job_logs[81] = "\n".join(["setup", *_echoes(GIT_TOKEN), "FAILED"]) + "\n"
    with structlog.testing.capture_logs() as structured:
        result = await call(endpoints, world.bearer(), "ci_status", {})
    assert not result.is_error, result.text
    assert "status lint: failure token" in result.text and result.text.rstrip().endswith("FAILED")
    await _no_fragment_anywhere(world, result.text, structured)


async def test_a_tool_name_carrying_a_piece_is_redacted_in_the_audit_and_the_log(
    world: World, endpoints: McpEndpoints
) -> None:
    name = f"x_{FORGE_TOKEN[4:24]}"
    with structlog.testing.capture_logs() as structured:
        with pytest.raises(McpClientError) as raised:
            await call(endpoints, world.bearer(), name, {})
        await world.end_run()
        dead = await call(endpoints, world.bearer(), name, {})
    assert _runs(str(raised.value)) == [] and _runs(dead.text) == []
    events = await world.audit.log(CONVERSATION)
    assert [e.outcome for e in events] == ["refused", "refused"]
    for event in events:
        assert _runs(event.tool) == [] and _runs(event.detail) == [], event
    assert len(structured) >= 2
    for entry in structured:
        assert _runs(json.dumps(entry, default=str)) == [], entry
