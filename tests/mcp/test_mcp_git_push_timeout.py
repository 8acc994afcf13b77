"""A push that times out: the remote is asked whether it landed, and the answer is what is true.

The remote's pre-receive hook holds the push past ``git_timeout_s`` and lets it go only once the
tool asks the remote for its refs (the fake remote marks that moment), so the push truly lands
(or is refused) after the tool's git timed out: no sleep in the test decides the order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp_world import CONVERSATION, World, call

from synthorg.mcp import McpConfig, McpEndpoints, create_mcp_app, serve_mcp

BRANCH = f"synthorg/{CONVERSATION}"
TIMEOUT_S = 5.0
HOOK_DEADLINE_S = 60


def _hold_pushes(world: World, *, accept: bool) -> Path:
    """A pre-receive hook that waits (bounded) for the tool's ref listing, then decides."""
    asked = world.tmp / "ls-remote-asked"
    world.git_state.upload_pack_seen = asked
    hook = world.remote / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(
        "#!/bin/sh\n"
        f"i=0; while [ ! -e {asked} ] && [ $i -lt {HOOK_DEADLINE_S * 20} ]; do\n"
        "  sleep 0.05; i=$((i+1))\ndone\n"
        f"exit {0 if accept else 1}\n"
    )
    hook.chmod(0o755)
    return asked


@pytest.fixture
async def slow_endpoints(world: World) -> AsyncIterator[McpEndpoints]:
    data = world.config.model_dump()
    data["projects"][0]["git_timeout_s"] = TIMEOUT_S
    app = create_mcp_app(McpConfig.model_validate(data), world.signer, world.vault, world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        yield ends


def _remote_sha(world: World) -> str | None:
    ref = world.remote / "refs" / "heads" / BRANCH
    return ref.read_text().strip() if ref.exists() else None


async def test_a_push_that_lands_after_the_timeout_is_reported_landed(
    world: World, slow_endpoints: McpEndpoints
) -> None:
    sha = world.commit_on(BRANCH)
    _hold_pushes(world, accept=True)
    result = await call(slow_endpoints, world.bearer(), "git_push", {})
    assert not result.is_error, result.text
    assert f"timed out after {TIMEOUT_S:g}s" in result.text
    assert f"landed: the remote shows {BRANCH} at {sha[:12]}" in result.text
    assert _remote_sha(world) == sha
    [event] = await world.audit.of(CONVERSATION)
    assert event.outcome == "ok" and "landed" in event.detail


async def test_a_push_refused_after_the_timeout_is_reported_not_landed(
    world: World, slow_endpoints: McpEndpoints
) -> None:
    sha = world.commit_on(BRANCH)
    _hold_pushes(world, accept=False)
    result = await call(slow_endpoints, world.bearer(), "git_push", {})
    assert result.is_error
    assert f"timed out after {TIMEOUT_S:g}s" in result.text
    assert f"not landed: the remote does not show {BRANCH} at {sha[:12]}" in result.text
    assert _remote_sha(world) is None
    [event] = await world.audit.of(CONVERSATION)
    assert event.outcome == "error" and "not landed" in event.detail


async def test_a_push_whose_remote_cannot_be_asked_is_reported_unknown(
    world: World, slow_endpoints: McpEndpoints
) -> None:
    world.commit_on(BRANCH)
    asked = _hold_pushes(world, accept=True)
    world.git_state.refuse_upload_pack = True
    try:
        result = await call(slow_endpoints, world.bearer(), "git_push", {})
    finally:
        asked.touch()  # let the held push go, whatever happened
    assert result.is_error
    assert f"timed out after {TIMEOUT_S:g}s" in result.text
    assert "whether it landed is unknown: the remote could not be asked" in result.text
    [event] = await world.audit.of(CONVERSATION)
    assert event.outcome == "unknown" and "unknown" in event.detail
