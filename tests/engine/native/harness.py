"""Test harness: the real gateway (in-process ASGI), SQLite store, runner and bwrap toolbox."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx

from synthorg.domain import (
    AgentIdentity,
    ConfirmationPolicy,
    ConversationRecord,
    ExecutionResult,
    StoredEvent,
    Task,
    TokenUsage,
    WorkspaceInfo,
)
from synthorg.domain.binding import RunBinding
from synthorg.engine import LoopRunner, RunCheckers, RunControl, budget_checker, flag_checker
from synthorg.engine.native import NativeLoopDeps, NativeLoopSettings, OpenAICompatClient
from synthorg.engine.native.factories import NATIVE_FACTORIES
from synthorg.engine.native.tools import McpClientFactory
from synthorg.engine.native.turn import CheckpointHook
from synthorg.engine.protocol import GatewayAccess, LoopContext
from synthorg.engine.registry import LoopDependencies, LoopRegistry
from synthorg.gateway.app import GatewayApp
from synthorg.gateway.config import GatewayConfig, ModelPrice, ProviderConfig
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import ScriptedModel
from synthorg.gateway.service import Gateway
from synthorg.gateway.signer import GatewaySigner
from synthorg.sandbox import BwrapSandbox, SandboxRequest, ToolboxClient
from synthorg.store import Store, open_store

MODEL = "scripted-test"
PRICE = ModelPrice(input_per_mtok_usd=Decimal(1000), output_per_mtok_usd=Decimal(2000))
"""Expensive on purpose: a turn costs cents, so a ceiling is reached within a few turns."""

CALC = '''"""A tiny calculator."""


def add(a, b):
    return a - b


def multiply(a, b):
    return a * b
'''

TEST_CALC = """import unittest

from calc import add, multiply


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_multiply(self):
        self.assertEqual(multiply(2, 3), 6)


if __name__ == "__main__":
    unittest.main()
"""


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a fixed identity."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def make_repo(path: Path) -> Path:
    """A git repository whose test fails until calc.add is fixed."""
    path.mkdir(parents=True)
    (path / "calc.py").write_text(CALC)
    (path / "test_calc.py").write_text(TEST_CALC)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "calculator with a bug")
    return path


def usage_probe(gateway: Gateway, execution_id: str):  # type: ignore[no-untyped-def]
    async def usage() -> TokenUsage:
        row = await gateway.usage(execution_id)
        return TokenUsage(tokens_in=row.tokens_in, tokens_out=row.tokens_out, cost_usd=row.cost_usd)

    return usage


@dataclass
class Run:
    """One run's context pieces, for the test to poke at."""

    context: LoopContext
    control: RunControl
    cancel: asyncio.Event
    shutdown: asyncio.Event
    binding: RunBinding


@dataclass
class Harness:
    """Everything behind the loop is real; only the model is a script."""

    store: Store
    gateway: Gateway
    app: GatewayApp
    provider: ScriptedProvider
    repo: Path
    runner: LoopRunner
    registry: LoopRegistry = field(default_factory=lambda: LoopRegistry(NATIVE_FACTORIES))

    def model_client(self, access: GatewayAccess, model: str, settings: NativeLoopSettings):  # type: ignore[no-untyped-def]
        return OpenAICompatClient(
            access.base_url,
            access.bearer,
            model,
            # A server answers 500 to an app crash; so does this transport.
            transport=httpx.ASGITransport(app=self.app, raise_app_exceptions=False),
        )

    async def new_run(
        self,
        script: ScriptedModel,
        *,
        loop_type: str = "react",
        prompt: str = "Fix the failing test in this repository.",
        max_turns: int = 30,
        ceiling: Decimal | None = None,
        budget: Decimal | None = None,
        conversation_id: str | None = None,
        artifacts_expected: bool = True,
        policy: ConfirmationPolicy = ConfirmationPolicy.NEVER,
        prior: tuple[StoredEvent, ...] = (),
        mcp_base_url: str | None = None,
    ) -> Run:
        self.provider.set_script(MODEL, script)
        cid = conversation_id or f"conv-{secrets.token_hex(4)}"
        task = Task(
            id=f"task-{cid}",
            project_id="proj",
            prompt=prompt,
            repository=str(self.repo),
            artifacts_expected=artifacts_expected,
        )
        agent = AgentIdentity(id="agent-1")
        now = datetime.now(UTC)
        if conversation_id is None:
            await self.store.create_conversation(
                ConversationRecord(
                    id=cid,
                    task=task,
                    agent=agent,
                    loop_type=loop_type,
                    model=MODEL,
                    provider="scripted",
                    created_at=now,
                    updated_at=now,
                    max_turns=max_turns,
                )
            )
        binding = RunBinding(
            execution_id=f"exec-{secrets.token_hex(4)}",
            agent_id=agent.id,
            task_id=task.id,
            project_id="proj",
            conversation_id=cid,
            provider="scripted",
            model_id=MODEL,
            cost_ceiling=ceiling,
        )
        bearer = await self.gateway.issue(binding)
        control, cancel, shutdown = RunControl(), asyncio.Event(), asyncio.Event()
        usage = usage_probe(self.gateway, binding.execution_id)
        checkers = RunCheckers(
            task_cancellation=flag_checker(cancel),
            shutdown=flag_checker(shutdown),
            budget=budget_checker(usage, budget),
        )
        context = LoopContext(
            task=task,
            agent=agent,
            conversation_id=cid,
            execution_id=binding.execution_id,
            model=MODEL,
            provider="scripted",
            workspace=WorkspaceInfo(path=str(self.repo), branch="main"),
            gateway=GatewayAccess(
                base_url="http://gateway/v1", bearer=bearer, usage=usage, mcp_base_url=mcp_base_url
            ),
            emit=self.runner.sink(cid, checkers, control),
            control=control,
            max_turns=max_turns,
            budget_usd=budget,
            confirmation_policy=policy,
            resumed=bool(prior),
            prior_events=prior,
        )
        return Run(context, control, cancel, shutdown, binding)

    @asynccontextmanager
    async def toolbox(self, conversation_id: str = "c") -> AsyncIterator[ToolboxClient]:
        request = SandboxRequest(
            argv=["toolbox"], workspace=self.repo, conversation_id=conversation_id
        )
        async with ToolboxClient(BwrapSandbox(), request) as client:
            yield client

    async def execute(
        self,
        run: Run,
        executor: ToolboxClient,
        *,
        settings: NativeLoopSettings | None = None,
        checkpoint: CheckpointHook | None = None,
        mcp: McpClientFactory | None = None,
    ) -> ExecutionResult:
        deps = NativeLoopDeps(
            executor=executor,
            mcp_client_factory=mcp,
            checkpoint=checkpoint,
            model_client_factory=self.model_client,
            settings=settings or NativeLoopSettings(),
        )
        record = await self.store.get_conversation(run.context.conversation_id)
        loop = self.registry.build(record.loop_type, LoopDependencies(deps))
        return await self.runner.run(loop, run.context)

    async def events(self, conversation_id: str) -> list[StoredEvent]:
        return await self.store.history(conversation_id, limit=10_000)


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    """A harness in ``tmp_path``; the store and repository are reused when they exist."""
    store = await open_store(tmp_path / "store.db")
    provider = ScriptedProvider({})
    config = GatewayConfig(
        providers=[
            ProviderConfig(name="scripted", kind="scripted", models=(MODEL,), script="echo")
        ],
        prices={MODEL: PRICE},
        signing_key_file=tmp_path / "gateway.key",
        ledger_refresh_s=0,
    )
    signer = GatewaySigner(
        secrets.token_bytes(32), served=config.serves, max_ttl_s=config.token_ttl_s
    )
    gateway = Gateway(config, signer, store, {"scripted": provider})
    repo = tmp_path / "repo"
    if not repo.exists():
        make_repo(repo)
    try:
        yield Harness(
            store=store,
            gateway=gateway,
            app=GatewayApp(gateway),
            provider=provider,
            repo=repo,
            runner=LoopRunner(store),
        )
    finally:
        await store.close()
