"""End to end through the real app: a signed `issues.labeled` delivery, a run that lands, the
control plane's push of synthorg/<conversation> to a real git remote (git http-backend) and
its pull request on a fake GitHub validated against GitHub's REST description; a failed check
and then a review on that PR resume the same conversation and update the PR; the issue keeps
one status comment; the forge token is in no event and no request but the forge's own."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from synthorg.domain.events import ConfirmationRequestEvent, ToolAuditEvent
from synthorg.engine.control import Decision
from synthorg.forge.config import ForgeProject
from synthorg.mcp.config import McpConfig
from synthorg.server import KeyStore, ServerSettings
from synthorg.store.protocol import DeliveryState
from tests.mcp.mcp_servers import GitRemoteHandler, GitRemoteState, serving

from .conftest import Forge, example, forge_app, messages_of, on_pull, until, web_project
from .fake_forge import FakeGitHub, FakeGitHubHandler

SECRET = "hook-secret-0123456789abcdef"
GIT_TOKEN = "git-token-0f1e2d3c4b5a69788796a5b4"
FORGE_TOKEN = "forge-token-a1b2c3d4e5f60718293a4b5c"


@dataclass
class World:
    """The remote, the fake GitHub and the MCP config naming them."""

    remote: Path
    github: FakeGitHub
    mcp: McpConfig


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def world(tmp_path: Path, repo: Path) -> Iterator[World]:
    served = tmp_path / "served"
    remote = served / "widgets.git"
    _git("init", "-q", "--bare", "-b", "main", str(remote))
    _git("--git-dir", str(repo / ".git"), "push", "-q", str(remote), "HEAD:main")
    git_state = GitRemoteState(root=served, username="x-access-token", token=GIT_TOKEN)
    github = FakeGitHub(owner="Codertocat", repo="Hello-World", token=FORGE_TOKEN, remote=remote)
    with serving(GitRemoteHandler, git_state) as git_url, serving(FakeGitHubHandler, github) as gh:
        mcp = McpConfig.model_validate(
            {
                "projects": [
                    {
                        "project_id": "web",
                        "repository": str(repo),
                        "remote_url": f"{git_url}/widgets.git",
                        "git_token_env": "WEB_GIT_TOKEN",
                        "forge": {
                            "api_base_url": f"{gh}/api/v3",
                            "owner": "Codertocat",
                            "repo": "Hello-World",
                            "token_env": "WEB_FORGE_TOKEN",
                            "default_base": "main",
                            "web_base_url": "https://github.test",
                        },
                    }
                ]
            }
        )
        yield World(remote=remote, github=github, mcp=mcp)


OpenForge = Callable[[ForgeProject], AbstractAsyncContextManager[Forge]]
"""Serves the real app for a project, its forge and remote those of ``world``."""


@pytest.fixture
def open_forge(
    home: Path,
    settings: ServerSettings,
    key_store: KeyStore,
    world: World,
    _scripts_importable: None,
) -> OpenForge:
    env = {"WEB_GIT_TOKEN": GIT_TOKEN, "WEB_FORGE_TOKEN": FORGE_TOKEN}

    def opened(project: ForgeProject) -> AbstractAsyncContextManager[Forge]:
        return forge_app(home, settings, key_store, project, SECRET, mcp=world.mcp, env=env)

    return opened


async def _settled_run(forge: Forge, delivery: str) -> str:
    settled = await forge.settled(delivery)
    assert settled.state is DeliveryState.STARTED, settled.outcome
    assert settled.conversation_id is not None
    return settled.conversation_id


async def _status(forge: Forge, world: World, starts: str) -> str:
    """The issue's one status comment once it says ``starts`` (bounded wait)."""

    async def probe() -> list[str]:
        return world.github.status_comments(1)

    [comment] = await until(probe, lambda c: len(c) == 1 and starts in c[0], 60)
    return str(comment)


async def test_an_issue_becomes_a_pull_request_and_feedback_updates_it(
    capfd: pytest.CaptureFixture[str], repo: Path, world: World, open_forge: OpenForge
) -> None:
    async with open_forge(web_project(repo, model="answer_each")) as forge:
        await forge.deliver("issues", example("issues.labeled"), delivery="e-1")
        conversation = await _settled_run(forge, "e-1")
        comment = await _status(forge, world, "Finished: pull request #1")
        [pull] = world.github.pulls.values()
        branch = f"synthorg/{conversation}"
        landed = _git("--git-dir", str(world.remote), "rev-parse", f"refs/heads/{branch}")
        assert pull["head"]["ref"] == branch and pull["head"]["sha"] == landed
        assert landed == _git("-C", str(repo), "rev-parse", f"refs/heads/{branch}")
        assert pull["title"] == "Fix #1: Spelling error in the README file"
        body = pull["body"]
        assert body.startswith("Resolves #1.") and "- turns: 2" in body and "- loop: react" in body
        assert f"https://console.test/#/c/{conversation}" in body and "USD of 5 USD" in body
        assert "Resolves #1." in comment
        # The control plane keeps the pull request it opened, as the forge answered.
        kept = await forge.store.conversation_pull(conversation)
        assert kept is not None and (kept.number, kept.html_url) == (1, pull["html_url"])

        # A failed check on the run's PR: the same conversation resumes with the failing job's
        # log tail (read by the ci_status code, the log fetched without the token), lands, and
        # the PR follows.
        world.github.checks[landed] = [(77, "Octocoders-linter", "failure")]
        world.github.job_logs[77] = "step 1 ok\nAssertionError: expected 2, got 3\n"
        await forge.deliver(
            "check_run", on_pull("check_run.completed", conversation, 1), delivery="e-2"
        )
        assert await _settled_run(forge, "e-2") == conversation
        told = "\n".join(await messages_of(forge, conversation))
        assert "check Octocoders-linter: completed failure" in told
        assert "AssertionError: expected 2, got 3" in told
        assert world.github.blob_auth_headers == [""]
        await forge.components.service.wait(conversation)
        await _status(forge, world, "Finished: pull request #1")
        second = _git("--git-dir", str(world.remote), "rev-parse", f"refs/heads/{branch}")
        assert second != landed and len(world.github.pulls) == 1
        assert world.github.pulls[1]["head"]["sha"] == second

        review = on_pull("pull_request_review.submitted", conversation, 1)
        review["review"]["body"] = "Looks close; please also fix the title."
        await forge.deliver("pull_request_review", review, delivery="e-3")
        assert await _settled_run(forge, "e-3") == conversation
        await forge.components.service.wait(conversation)
        await _status(forge, world, "Finished: pull request #1")
        third = _git("--git-dir", str(world.remote), "rev-parse", f"refs/heads/{branch}")
        assert third != second and world.github.pulls[1]["head"]["sha"] == third

        assert world.github.violations == []
        audits = [
            (e.event.tool, e.event.outcome)
            for e in await forge.store.history(conversation, kinds=frozenset({"tool_audit"}))
            if isinstance(e.event, ToolAuditEvent) and e.event.tool.startswith("forge.")
        ]
        assert audits.count(("forge.trigger", "ok")) == 3
        assert audits.count(("forge.publish", "ok")) == 3
        # The token went to the forge only, and into no event of the conversation.
        assert set(world.github.auth_headers) == {f"Bearer {FORGE_TOKEN}"}
        events = await forge.store.history(conversation, limit=10_000)
        dumped = "\n".join(e.model_dump_json() for e in events)
        assert FORGE_TOKEN not in dumped and GIT_TOKEN not in dumped
        assert (
            FORGE_TOKEN not in (await forge.store.get_conversation(conversation)).model_dump_json()
        )


async def test_a_run_with_nothing_to_land_opens_nothing(
    repo: Path, world: World, open_forge: OpenForge
) -> None:
    async with open_forge(web_project(repo, model="done")) as forge:
        await forge.deliver("issues", example("issues.labeled"), delivery="n-1")
        await _settled_run(forge, "n-1")
        await _status(forge, world, "Finished with nothing to land")
        assert world.github.pulls == {} and world.github.violations == []


async def test_a_run_waiting_for_approval_says_so_on_the_issue(
    repo: Path, world: World, open_forge: OpenForge
) -> None:
    async with open_forge(
        web_project(repo, model="answer_each", confirmation_policy="always")
    ) as forge:
        await forge.deliver("issues", example("issues.labeled"), delivery="a-1")
        conversation = await _settled_run(forge, "a-1")
        comment = await _status(forge, world, "Waiting for approval: https://console.test/#/c/")
        assert conversation in comment and world.github.pulls == {}
        [request] = [
            e.event
            for e in await forge.store.history(conversation, limit=1000)
            if isinstance(e.event, ConfirmationRequestEvent)
        ]
        accepted = frozenset(p.action_id for p in request.pending)
        await forge.components.service.decide(
            conversation, Decision(accepted=accepted, rejected=frozenset(), approver="abe")
        )
        await _status(forge, world, "Finished: pull request #1")
        assert len(world.github.pulls) == 1 and world.github.violations == []


async def test_a_trigger_past_the_daily_cap_is_refused_with_a_comment(
    repo: Path, world: World, open_forge: OpenForge
) -> None:
    async with open_forge(
        web_project(repo, model="answer_each", daily_cap_usd="0.000001")
    ) as forge:
        await forge.deliver("issues", example("issues.labeled"), delivery="d-1")
        conversation = await _settled_run(forge, "d-1")
        await forge.components.service.wait(conversation)
        await _status(forge, world, "Finished: pull request #1")
        second = example("issues.labeled")
        second["issue"]["number"] = 2
        await forge.deliver("issues", second, delivery="d-2")
        assert (await forge.settled("d-2")).state is DeliveryState.REFUSED

        async def on_two() -> list[str]:
            return world.github.status_comments(2)

        [said] = await until(on_two, lambda c: len(c) == 1, 30)
        assert said.startswith("Not started: daily cap reached: ") and "of 0.000001 USD" in said
        assert len(world.github.pulls) == 1 and world.github.violations == []
