"""open_pull_request against a loopback forge implementing GitHub's pulls endpoint."""

from __future__ import annotations

import pytest
from mcp_world import CONVERSATION, FORGE_TOKEN, OTHER_CONVERSATION, World, call, git
from pydantic import ValidationError

from synthorg.mcp import (
    CredentialKind,
    CredentialVault,
    McpClientError,
    McpConfig,
    McpEndpoints,
    create_mcp_app,
    serve_mcp,
)

BRANCH = f"synthorg/{CONVERSATION}"


async def _push(world: World, endpoints: McpEndpoints) -> None:
    world.commit_on(BRANCH)
    pushed = await call(endpoints, world.bearer(), "git_push", {})
    assert not pushed.is_error, pushed.text


async def test_opens_a_pull_request_for_the_pushed_branch(
    world: World, endpoints: McpEndpoints
) -> None:
    await _push(world, endpoints)
    result = await call(
        endpoints,
        world.bearer(),
        "open_pull_request",
        {"title": "Add the change", "body": "Done by the agent.", "draft": True},
    )
    assert not result.is_error, result.text
    assert result.text == (
        f"opened pull request #1 ({BRANCH} -> main): https://forge.test/acme/widgets/pull/1"
    )
    assert world.forge_state.pulls == [
        {
            "title": "Add the change",
            "head": BRANCH,
            "base": "main",
            "body": "Done by the agent.",
            "draft": True,
        }
    ]
    # The repository's default branch was asked (no default_base configured), then the pull.
    assert world.forge_state.auth_headers == [f"Bearer {FORGE_TOKEN}"] * 2
    events = await world.audit.of(CONVERSATION)
    assert [(e.tool, e.outcome) for e in events] == [
        ("git_push", "ok"),
        ("open_pull_request", "ok"),
    ]
    assert events[1].arguments["title"] == "Add the change"


def _with_forge(world: World, **forge: object) -> McpConfig:
    data = world.config.model_dump()
    data["projects"][0]["forge"].update(forge)
    return McpConfig.model_validate(data)


async def test_another_runs_branch_is_never_a_base(world: World, endpoints: McpEndpoints) -> None:
    # The other run's branch exists on the remote (it pushed it): still not a base for this run.
    other = f"synthorg/{OTHER_CONVERSATION}"
    world.commit_on(other)
    git("--git-dir", str(world.repo / ".git"), "push", "-q", str(world.remote), other)
    await _push(world, endpoints)
    for base in (other, "synthorg/anything", "develop"):
        result = await call(
            endpoints, world.bearer(), "open_pull_request", {"title": "x", "base": base}
        )
        assert result.is_error, result.text
        assert f"base {base!r} is not one of project 'alpha''s base branches" in result.text
        assert "may be opened into: main" in result.text
    assert world.forge_state.pulls == []
    assert [e.outcome for e in await world.audit.of(CONVERSATION)][1:] == ["refused"] * 3


async def test_the_configured_base_branches_are_allowed(world: World) -> None:
    git("--git-dir", str(world.repo / ".git"), "push", "-q", str(world.remote), "main:develop")
    config = _with_forge(world, base_branches=["main", "develop"])
    app = create_mcp_app(config, world.signer, world.vault, world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        await _push(world, ends)
        into = await call(
            ends, world.bearer(), "open_pull_request", {"title": "x", "base": "develop"}
        )
        assert not into.is_error, into.text
        other = await call(ends, world.bearer(), "open_pull_request", {"title": "y", "base": "qa"})
        assert other.is_error and "may be opened into: develop, main" in other.text
    assert [p["base"] for p in world.forge_state.pulls] == ["develop"]


async def test_without_a_configured_default_the_repositorys_default_branch_is_the_base(
    world: World, endpoints: McpEndpoints
) -> None:
    git("--git-dir", str(world.repo / ".git"), "push", "-q", str(world.remote), "main:trunk")
    world.forge_state.default_branch = "trunk"
    await _push(world, endpoints)
    result = await call(endpoints, world.bearer(), "open_pull_request", {"title": "x"})
    assert not result.is_error, result.text
    assert f"({BRANCH} -> trunk)" in result.text
    main = await call(
        endpoints, world.bearer(), "open_pull_request", {"title": "y", "base": "main"}
    )
    assert main.is_error and "may be opened into: trunk" in main.text
    assert [p["base"] for p in world.forge_state.pulls] == ["trunk"]


@pytest.mark.parametrize("field", ["base_branches", "default_base"])
def test_a_run_branch_cannot_be_configured_as_a_base(field: str) -> None:
    value: object = ["main", "synthorg/conv-1"] if field == "base_branches" else "synthorg/x"
    forge = {"owner": "acme", "repo": "widgets", field: value}
    with pytest.raises(ValidationError, match="is a run branch"):
        McpConfig.model_validate({"projects": [{"project_id": "alpha", "forge": forge}]})


async def test_the_forge_validation_error_is_reported(
    world: World, endpoints: McpEndpoints
) -> None:
    # Not pushed yet: the forge answers 422 like GitHub does.
    result = await call(endpoints, world.bearer(), "open_pull_request", {"title": "Too early"})
    assert result.is_error
    assert "the forge refused the pull request (HTTP 422)" in result.text
    assert f"{BRANCH} does not exist" in result.text
    assert (await world.audit.of(CONVERSATION))[0].outcome == "error"


async def test_a_wrong_forge_token_is_refused_by_the_forge(world: World) -> None:
    vault = CredentialVault()
    vault.put("alpha", CredentialKind.FORGE, "ghp_wrong_token_0000")
    app = create_mcp_app(world.config, world.signer, vault, world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        result = await call(ends, world.bearer(), "open_pull_request", {"title": "x"})
    assert result.is_error and "HTTP 401" in result.text and "Bad credentials" in result.text
    assert world.forge_state.pulls == []


async def test_without_a_forge_token_nothing_is_sent(world: World) -> None:
    app = create_mcp_app(world.config, world.signer, CredentialVault(), world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        result = await call(ends, world.bearer(), "open_pull_request", {"title": "x"})
    assert result.is_error and "has no forge token in the vault" in result.text
    assert world.forge_state.auth_headers == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"title": "x", "head": f"synthorg/{OTHER_CONVERSATION}"}, "wrong branch"),
        ({"title": "x", "head": "main"}, "is protected"),
        ({"title": "x", "base": BRANCH}, "base and head are both"),
        ({"title": "x", "base": "bad..name"}, "is not a valid branch name"),
        ({"title": ""}, "invalid arguments for open_pull_request: title"),
        ({"title": "x", "project_id": "beta"}, "cannot act on project 'beta'"),
    ],
)
async def test_out_of_scope_requests_are_refused(
    world: World, endpoints: McpEndpoints, arguments: dict[str, object], message: str
) -> None:
    result = await call(endpoints, world.bearer(), "open_pull_request", arguments)
    assert result.is_error and message in result.text, result.text
    assert world.forge_state.auth_headers == []
    [event] = await world.audit.of(CONVERSATION)
    assert event.outcome == "refused"


async def test_another_projects_bearer_cannot_open_a_pull_request_here(
    world: World, endpoints: McpEndpoints
) -> None:
    beta = world.bearer(project="beta", conversation="conv-beta-1")
    named = await call(endpoints, beta, "open_pull_request", {"title": "x", "project_id": "alpha"})
    assert named.is_error and "scoped to project 'beta'" in named.text
    own = await call(endpoints, beta, "open_pull_request", {"title": "x"})
    assert own.is_error and "not configured for project 'beta'" in own.text
    assert world.forge_state.auth_headers == []


async def test_expired_bearer_cannot_open_a_pull_request(
    world: World, endpoints: McpEndpoints
) -> None:
    token = world.bearer(ttl_s=1)
    world.clock.now += 2
    with pytest.raises(McpClientError, match="bearer expired"):
        await call(endpoints, token, "open_pull_request", {"title": "x"})
    assert world.forge_state.auth_headers == []
