"""The MCP test world: a project repo, its authenticated loopback remote and forge, the server."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import (
    FetchHandler,
    FetchState,
    ForgeHandler,
    ForgeState,
    GitRemoteHandler,
    GitRemoteState,
    serving,
)

from synthorg.domain import AgentIdentity, ConversationRecord, Task, ToolAuditEvent
from synthorg.domain.binding import RunBinding
from synthorg.gateway.signer import GatewaySigner
from synthorg.mcp import (
    CredentialVault,
    McpConfig,
    McpEndpoints,
    McpToolClient,
    ToolCallResult,
    create_mcp_app,
    serve_mcp,
)
from synthorg.store.protocol import ExecutionStatus, ExecutionUsage
from synthorg.store.sqlite import SqliteStore

GIT_TOKEN = "ghs_gitPUSHtoken_5b1f0e9a7c3d4e2f8a6b"
FORGE_TOKEN = "ghp_forgeAPItoken_9d8c7b6a5f4e3d2c1b0a"
CONVERSATION = "conv-alpha-1"
OTHER_CONVERSATION = "conv-alpha-2"
BRANCH = f"synthorg/{CONVERSATION}"
"""The run's own branch."""

_IDENTITY = {
    "GIT_AUTHOR_NAME": "SynthOrg Test",
    "GIT_AUTHOR_EMAIL": "test@synthorg.invalid",
    "GIT_COMMITTER_NAME": "SynthOrg Test",
    "GIT_COMMITTER_EMAIL": "test@synthorg.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git for test setup with a fixed identity and no user config."""
    env = {**os.environ, **_IDENTITY}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def execution_of(conversation: str) -> str:
    """The execution id the tests' bearers carry for a conversation."""
    return f"exec-{conversation}"


KNOWN_CONVERSATIONS = (
    (CONVERSATION, "alpha"),
    (OTHER_CONVERSATION, "alpha"),
    ("conv-beta-1", "beta"),
    ("conv-g", "gamma"),
)


class StoreAudit:
    """The MCP server's store in the tests: the real SQLite store, with readers for the audit."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    @property
    def ledger_id(self) -> str:
        return self.store.ledger_id

    async def append(self, conversation_id: str, event: ToolAuditEvent, /) -> object:
        return await self.store.append(conversation_id, event)

    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        return await self.store.get_conversation(conversation_id)

    async def get_execution(self, execution_id: str) -> ExecutionUsage:
        return await self.store.get_execution(execution_id)

    async def log(self, conversation_id: str) -> list[ToolAuditEvent]:
        """Every audit event of the conversation: intents ('started') and outcomes."""
        stored = await self.store.history(
            conversation_id, kinds=frozenset({"tool_audit"}), limit=1000
        )
        events = [s.event for s in stored]
        assert all(isinstance(e, ToolAuditEvent) for e in events)
        return events  # type: ignore[return-value]

    async def of(self, conversation_id: str) -> list[ToolAuditEvent]:
        """The outcome events of the conversation (each call's intent checked to precede it)."""
        events = await self.log(conversation_id)
        outcomes: list[ToolAuditEvent] = []
        open_intents: list[str] = []
        for event in events:
            if event.outcome == "started":
                open_intents.append(event.tool)
                continue
            if event.tool in open_intents:
                open_intents.remove(event.tool)
            outcomes.append(event)
        return outcomes

    async def all(self) -> list[ToolAuditEvent]:
        return [e for cid, _ in KNOWN_CONVERSATIONS for e in await self.of(cid)]


def _record(conversation_id: str, project_id: str) -> ConversationRecord:
    now = datetime.now(UTC)
    return ConversationRecord(
        id=conversation_id,
        task=Task(id=f"task-{conversation_id}", project_id=project_id, prompt="p", repository="/r"),
        agent=AgentIdentity(id="agent-1"),
        loop_type="react",
        model="scripted-1",
        created_at=now,
        updated_at=now,
    )


@dataclass
class Clock:
    """A settable clock for the signer (to expire bearers without sleeping)."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """Everything one test acts on."""

    repo: Path
    remote: Path
    remote_url: str
    git_state: GitRemoteState
    forge_state: ForgeState
    forge_url: str
    fetch_url: str
    fetch_state: FetchState
    config: McpConfig
    vault: CredentialVault
    audit: StoreAudit
    clock: Clock
    signer: GatewaySigner
    tmp: Path

    def bearer(
        self, project: str = "alpha", conversation: str = CONVERSATION, ttl_s: int = 600
    ) -> str:
        binding = RunBinding(
            execution_id=execution_of(conversation),
            agent_id="agent-1",
            task_id="task-1",
            project_id=project,
            conversation_id=conversation,
            provider="scripted",
            model_id="scripted-1",
        )
        return self.signer.mint(binding, ttl_s=ttl_s, ledger_id=self.audit.ledger_id)

    async def end_run(
        self, conversation: str = CONVERSATION, status: ExecutionStatus = ExecutionStatus.FINISHED
    ) -> None:
        """What the gateway does when a run ends: its ledger row is closed in the store."""
        await self.audit.store.set_execution_status(execution_of(conversation), status, "run ended")

    def commit_on(self, branch: str, name: str = "change.txt") -> str:
        exists = (
            subprocess.run(
                ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
                cwd=self.repo,
                capture_output=True,
            ).returncode
            == 0
        )
        git("checkout", "-q", *(() if exists else ("-b",)), branch, cwd=self.repo)
        (self.repo / name).write_text(f"work on {branch} at {time.time_ns()}\n")
        git("add", name, cwd=self.repo)
        git("commit", "-q", "-m", f"work on {branch}", cwd=self.repo)
        sha = git("rev-parse", "HEAD", cwd=self.repo)
        git("checkout", "-q", "main", cwd=self.repo)
        return sha


def make_config(data: dict[str, Any]) -> McpConfig:
    return McpConfig.model_validate(data)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    repo = tmp_path / "project"
    repo.mkdir()
    git("init", "-q", "-b", "main", str(repo))
    (repo / "README.md").write_text("project\n")
    git("add", "README.md", cwd=repo)
    git("commit", "-q", "-m", "initial", cwd=repo)

    served = tmp_path / "served"
    remote = served / "widgets.git"
    git("init", "-q", "--bare", "-b", "main", str(remote))
    git("--git-dir", str(repo / ".git"), "push", "-q", str(remote), "main:main")

    git_state = GitRemoteState(root=served, username="x-access-token", token=GIT_TOKEN)
    forge_state = ForgeState(owner="acme", repo="widgets", token=FORGE_TOKEN, remote=remote)
    fetch_state = FetchState()
    with (
        serving(GitRemoteHandler, git_state) as git_url,
        serving(ForgeHandler, forge_state) as forge_url,
        serving(FetchHandler, fetch_state) as fetch_url,
    ):
        config = make_config(
            {
                "projects": [
                    {
                        "project_id": "alpha",
                        "repository": str(repo),
                        "remote_url": f"{git_url}/widgets.git",
                        "git_token_env": "ALPHA_GIT_TOKEN",
                        "protected_branches": ["main", "master", "release/*"],
                        "forge": {
                            "api_base_url": f"{forge_url}/api/v3",
                            "owner": "acme",
                            "repo": "widgets",
                            "token_env": "ALPHA_FORGE_TOKEN",
                        },
                        "fetch": {
                            "allow": [f"{fetch_url}/allowed/"],
                            "max_bytes": 65536,
                            "timeout_s": 1.0,
                        },
                    },
                    {"project_id": "beta", "fetch": {"allow": [f"{fetch_url}/private/"]}},
                ]
            }
        )
        vault = CredentialVault.from_config(
            config, {"ALPHA_GIT_TOKEN": GIT_TOKEN, "ALPHA_FORGE_TOKEN": FORGE_TOKEN}
        )
        store = await SqliteStore.open(tmp_path / "store.db")
        for conversation_id, project_id in KNOWN_CONVERSATIONS:
            await store.create_conversation(_record(conversation_id, project_id))
            # What the run service does before it mints a run's bearer.
            await store.open_execution(
                execution_id=execution_of(conversation_id),
                conversation_id=conversation_id,
                model="scripted-1",
                provider="scripted",
                cost_ceiling_usd=None,
            )
        clock = Clock()
        signer = GatewaySigner(b"k" * 48, served=lambda p, m: True, max_ttl_s=6 * 3600, clock=clock)
        yield World(
            repo=repo,
            remote=remote,
            remote_url=f"{git_url}/widgets.git",
            git_state=git_state,
            forge_state=forge_state,
            forge_url=forge_url,
            fetch_url=fetch_url,
            fetch_state=fetch_state,
            config=config,
            vault=vault,
            audit=StoreAudit(store),
            clock=clock,
            signer=signer,
            tmp=tmp_path,
        )
        await store.close()


@pytest.fixture
async def endpoints(world: World) -> AsyncIterator[McpEndpoints]:
    app = create_mcp_app(world.config, world.signer, world.vault, world.audit)
    # A short socket path: AF_UNIX paths are limited to ~108 bytes.
    uds = Path(f"/tmp/synthorg-mcp-test-{os.getpid()}-{time.monotonic_ns()}.sock")
    async with serve_mcp(app, uds=uds, host="127.0.0.1", port=0) as ends:
        yield ends


@dataclass(frozen=True)
class OwnPull:
    """The run's pull request: its branch pushed, the pull request opened on the forge."""

    number: int
    head_sha: str


@pytest.fixture
async def own_pull(world: World, endpoints: McpEndpoints) -> OwnPull:
    world.commit_on(BRANCH)
    assert not (await call(endpoints, world.bearer(), "git_push", {})).is_error
    opened = await call(endpoints, world.bearer(), "open_pull_request", {"title": "Work"})
    assert not opened.is_error, opened.text
    number = max(world.forge_state.pull_objects)
    return OwnPull(number, world.forge_state.pull_objects[number]["head"]["sha"])


BearerFactory = Callable[..., str]


async def call(
    ends: McpEndpoints, bearer: str, tool: str, arguments: dict[str, Any] | None = None
) -> ToolCallResult:
    """One tool call over streamable HTTP on loopback TCP."""
    assert ends.url is not None
    return await McpToolClient(ends.url, bearer).call_tool(tool, arguments or {})
