"""git_push against a real smart-HTTP remote on loopback that requires the vault's credential."""

from __future__ import annotations

import asyncio
import subprocess

from mcp_world import CONVERSATION, OTHER_CONVERSATION, World, call, git

from synthorg.mcp import CredentialKind, CredentialVault, McpEndpoints, create_mcp_app, serve_mcp

BRANCH = f"synthorg/{CONVERSATION}"


def remote_sha(world: World, branch: str) -> str | None:
    done = subprocess.run(
        [
            "git",
            "--git-dir",
            str(world.remote),
            "rev-parse",
            "--verify",
            "--quiet",
            f"refs/heads/{branch}",
        ],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


async def test_pushes_the_runs_branch_with_the_vault_credential(
    world: World, endpoints: McpEndpoints
) -> None:
    sha = world.commit_on(BRANCH)
    result = await call(endpoints, world.bearer(), "git_push", {})
    assert not result.is_error, result.text
    assert f"pushed {BRANCH} at {sha[:12]}" in result.text
    assert "[new branch]" in result.text
    assert remote_sha(world, BRANCH) == sha
    assert world.git_state.authorized > 0
    [event] = await world.audit.of(CONVERSATION)
    assert (event.tool, event.outcome, event.arguments) == ("git_push", "ok", {})
    assert event.duration_ms > 0

    # A second commit fast-forwards; the explicit branch name is accepted too.
    sha2 = world.commit_on(BRANCH, "more.txt")
    again = await call(endpoints, world.bearer(), "git_push", {"branch": BRANCH})
    assert not again.is_error, again.text
    assert remote_sha(world, BRANCH) == sha2


async def test_without_the_credential_the_remote_refuses_the_push(world: World) -> None:
    world.commit_on(BRANCH)
    app = create_mcp_app(world.config, world.signer, CredentialVault(), world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        result = await call(ends, world.bearer(), "git_push", {})
    assert result.is_error
    assert "git push of synthorg/conv-alpha-1" in result.text and "failed" in result.text
    assert "the remote requires authentication" in result.text
    assert remote_sha(world, BRANCH) is None
    assert world.git_state.refused > 0 and world.git_state.authorized == 0
    [event] = await world.audit.of(CONVERSATION)
    assert event.outcome == "error"


async def test_a_wrong_vault_credential_is_refused_by_the_remote(world: World) -> None:
    world.commit_on(BRANCH)
    vault = CredentialVault()
    vault.put("alpha", CredentialKind.GIT, "not-the-token")
    app = create_mcp_app(world.config, world.signer, vault, world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        result = await call(ends, world.bearer(), "git_push", {})
    assert result.is_error and remote_sha(world, BRANCH) is None
    assert "not-the-token" not in result.text


async def test_another_conversations_branch_is_refused(
    world: World, endpoints: McpEndpoints
) -> None:
    world.commit_on(f"synthorg/{OTHER_CONVERSATION}")
    result = await call(
        endpoints, world.bearer(), "git_push", {"branch": f"synthorg/{OTHER_CONVERSATION}"}
    )
    assert result.is_error
    assert "wrong branch 'synthorg/conv-alpha-2'" in result.text
    assert f"only act on its own branch '{BRANCH}'" in result.text
    assert remote_sha(world, f"synthorg/{OTHER_CONVERSATION}") is None
    assert world.git_state.authorized == 0
    [event] = await world.audit.of(CONVERSATION)
    assert event.outcome == "refused"
    assert event.arguments == {"branch": f"synthorg/{OTHER_CONVERSATION}"}


async def test_protected_branches_are_refused(world: World, endpoints: McpEndpoints) -> None:
    before = remote_sha(world, "main")
    world.commit_on("release/1.0")
    for branch in ("main", "refs/heads/main", "master", "release/1.0"):
        result = await call(endpoints, world.bearer(), "git_push", {"branch": branch})
        assert result.is_error
        assert "is protected in project 'alpha'" in result.text, result.text
    assert remote_sha(world, "main") == before
    assert remote_sha(world, "release/1.0") is None
    assert world.git_state.authorized == 0
    assert {e.outcome for e in await world.audit.of(CONVERSATION)} == {"refused"}


async def test_another_projects_bearer_cannot_push_this_project(
    world: World, endpoints: McpEndpoints
) -> None:
    world.commit_on(BRANCH)
    beta = world.bearer(project="beta", conversation="conv-beta-1")
    # Naming the other project explicitly...
    named = await call(endpoints, beta, "git_push", {"project_id": "alpha"})
    assert named.is_error
    assert "scoped to project 'beta'; it cannot act on project 'alpha'" in named.text
    # ...or naming alpha's run branch: both refused; beta has no remote of its own either.
    branch = await call(endpoints, beta, "git_push", {"branch": BRANCH})
    assert branch.is_error and "wrong branch" in branch.text
    own = await call(endpoints, beta, "git_push", {})
    assert own.is_error and "git_push is not configured for project 'beta'" in own.text
    assert remote_sha(world, BRANCH) is None and world.git_state.authorized == 0
    assert [e.outcome for e in await world.audit.of("conv-beta-1")] == ["refused"] * 3
    assert await world.audit.of(CONVERSATION) == []


async def test_expired_bearer_cannot_push(world: World, endpoints: McpEndpoints) -> None:
    world.commit_on(BRANCH)
    token = world.bearer(ttl_s=5)
    world.clock.now += 5
    try:
        await call(endpoints, token, "git_push", {})
    except Exception as exc:
        assert "bearer expired" in str(exc)
    else:
        raise AssertionError("an expired bearer was accepted")
    assert remote_sha(world, BRANCH) is None


async def test_a_branch_without_commits_is_refused(world: World, endpoints: McpEndpoints) -> None:
    result = await call(endpoints, world.bearer(), "git_push", {})
    assert result.is_error and "does not exist yet" in result.text


async def test_a_rewritten_branch_is_not_force_pushed(
    world: World, endpoints: McpEndpoints
) -> None:
    first = world.commit_on(BRANCH)
    assert not (await call(endpoints, world.bearer(), "git_push", {})).is_error
    # Rewrite history locally: the remote must keep the pushed commit.
    git("branch", "-f", BRANCH, "main", cwd=world.repo)
    world.commit_on(BRANCH, "rewritten.txt")
    result = await call(endpoints, world.bearer(), "git_push", {})
    assert result.is_error and "rejected" in result.text
    assert remote_sha(world, BRANCH) == first


async def test_repository_config_planted_by_the_sandbox_is_never_read(
    world: World, endpoints: McpEndpoints
) -> None:
    # The sandbox can write the worktree; assume it also reached the repo's config and hooks:
    # a URL rewrite to its own server and a pre-push hook that would dump the environment.
    sha = world.commit_on(BRANCH)
    trap = world.tmp / "trap.txt"
    hooks = world.repo / ".git" / "hooks"
    (hooks / "pre-push").write_text(f"#!/bin/sh\nenv > {trap}\n")
    (hooks / "pre-push").chmod(0o755)
    git("config", "url.http://127.0.0.1:9/.insteadOf", world.remote_url, cwd=world.repo)
    git("config", "http.extraHeader", "X-Evil: 1", cwd=world.repo)
    result = await call(endpoints, world.bearer(), "git_push", {})
    assert not result.is_error, result.text
    assert remote_sha(world, BRANCH) == sha
    # The push reached the real remote despite the rewrite, and the hook never ran.
    assert not trap.exists()


async def test_concurrent_pushes_of_one_branch_are_serialised(
    world: World, endpoints: McpEndpoints
) -> None:
    sha = world.commit_on(BRANCH)
    results = await asyncio.gather(
        *(call(endpoints, world.bearer(), "git_push", {}) for _ in range(4))
    )
    assert [r.is_error for r in results] == [False] * 4, [r.text for r in results]
    summaries = sorted(r.text.rsplit(": ", 1)[1] for r in results)
    assert summaries == ["[new branch]", "[up to date]", "[up to date]", "[up to date]"]
    assert remote_sha(world, BRANCH) == sha
    assert len(await world.audit.of(CONVERSATION)) == 4
