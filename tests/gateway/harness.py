"""Test harness: scripted upstream over real HTTP, the gateway in front, a real SQLite ledger."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai

from synthorg.domain import AgentIdentity, ConversationRecord, Task
from synthorg.domain.binding import RunBinding
from synthorg.gateway.app import GatewayApp
from synthorg.gateway.config import GatewayConfig, ModelPrice, ProviderConfig
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import ScriptedSequence, ScriptedTurn
from synthorg.gateway.scripted_server import ScriptedUpstream
from synthorg.gateway.service import Gateway
from synthorg.store.protocol import Store

from .fake_upstream import FakeUpstream

UPSTREAM_MODEL = "up-model"
LOCAL_MODEL = "local-model"
PRICE = ModelPrice(input_per_mtok_usd=Decimal(1000), output_per_mtok_usd=Decimal(2000))
"""Expensive on purpose: a few tokens cost cents, so ceilings are easy to reach."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {"type": "function", "function": {"name": "finish", "parameters": {"type": "object"}}},
]


def tool_script() -> ScriptedSequence:
    """Three turns: a tool call, two parallel tool calls, a final answer."""
    return ScriptedSequence(
        "tool-script",
        [
            ScriptedTurn.call("terminal", text="Listing files.", command="ls -la"),
            ScriptedTurn(
                tool_calls=(
                    ScriptedTurn.call("terminal", command="cat README.md").tool_calls[0],
                    ScriptedTurn.call("finish", message="all done").tool_calls[0],
                )
            ),
            ScriptedTurn.say("The repository has a README. Done."),
        ],
    )


def make_config(tmp_path: Path, upstream_url: str) -> GatewayConfig:
    return GatewayConfig(
        providers=[
            ProviderConfig(
                name="upstream", kind="openai", base_url=upstream_url, models=(UPSTREAM_MODEL,)
            ),
            ProviderConfig(
                name="scripted",
                kind="scripted",
                models=(LOCAL_MODEL, "scripted-demo"),
                script="echo",
            ),
        ],
        prices={UPSTREAM_MODEL: PRICE, LOCAL_MODEL: PRICE},
        signing_key_file=tmp_path / "keys" / "gateway.key",
    )


@dataclass
class Harness:
    """The gateway in front of a scripted upstream, both over loopback HTTP."""

    app: GatewayApp
    gateway: Gateway
    upstream: ScriptedUpstream
    upstream_scripts: ScriptedProvider
    local_scripts: ScriptedProvider
    base_url: str
    store: Store

    async def run(
        self,
        *,
        model: str = UPSTREAM_MODEL,
        provider: str = "upstream",
        ceiling: Decimal | None = None,
        ttl_s: int = 600,
    ) -> tuple[RunBinding, str]:
        """Open an execution and mint its bearer."""
        return await open_run(self.gateway, model, provider, ceiling, ttl_s)

    def client(self, token: str) -> openai.AsyncOpenAI:
        """The official client pointed at the gateway, no retries."""
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=token, max_retries=0)


async def open_run(
    gateway: Gateway, model: str, provider: str, ceiling: Decimal | None, ttl_s: int = 600
) -> tuple[RunBinding, str]:
    """Open an execution of ``model`` at ``provider`` and mint its bearer."""
    binding = RunBinding(
        execution_id=f"exec-{secrets.token_hex(4)}",
        agent_id="agent-1",
        task_id="task-1",
        project_id="proj-1",
        conversation_id=f"conv-{secrets.token_hex(4)}",
        provider=provider,
        model_id=model,
        cost_ceiling=ceiling,
    )
    return binding, await gateway.issue(binding, ttl_s=ttl_s)


FAKE_MODEL = "fake-model"
FAKE_PRICE = ModelPrice(input_per_mtok_usd=Decimal(1000), output_per_mtok_usd=Decimal(1000))
"""The price of the attack report: $1000 per million tokens in and out."""


def fake_config(
    tmp_path: Path, upstream_url: str, idle_timeout_s: float = 1.0, **gateway: Any
) -> GatewayConfig:
    """One OpenAI-compatible provider 'fake' in front of the FakeUpstream (a stalled stream
    is cut after ``idle_timeout_s``)."""
    return GatewayConfig(
        providers=[
            ProviderConfig(
                name="fake",
                kind="openai",
                base_url=upstream_url,
                models=(FAKE_MODEL,),
                idle_timeout_s=idle_timeout_s,
            )
        ],
        prices={FAKE_MODEL: FAKE_PRICE},
        signing_key_file=tmp_path / "keys" / "gateway.key",
        **gateway,
    )


@dataclass
class FakeHarness:
    """The gateway (real HTTP, real SQLite ledger) in front of a FakeUpstream on loopback."""

    app: GatewayApp
    gateway: Gateway
    upstream: FakeUpstream
    base_url: str
    store: Store

    async def run(self, ceiling: Decimal | None = None) -> tuple[RunBinding, str]:
        """Open an execution of the fake model and mint its bearer."""
        return await open_run(self.gateway, FAKE_MODEL, "fake", ceiling)

    def client(self, token: str, **kwargs: Any) -> openai.AsyncOpenAI:
        """The official client pointed at the gateway, no retries."""
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=token, max_retries=0, **kwargs)

    def http(self, token: str) -> httpx.AsyncClient:
        """A raw HTTP client with the bearer set (to send what the official client refuses)."""
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers={"authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(60.0),
        )


def tree_conversation(
    budget: Decimal | None,
    root_id: str | None = None,
    *,
    model: str = FAKE_MODEL,
    provider: str = "fake",
) -> ConversationRecord:
    """A conversation of a delegation tree as the store keeps it: the root (``root_id``
    None, its budget the tree's) or a child of ``root_id`` with its share as budget."""
    now = datetime.now(UTC)
    return ConversationRecord(
        id=f"conv-{secrets.token_hex(6)}",
        task=Task(
            id=f"task-{secrets.token_hex(4)}", project_id="proj", prompt="p", repository="/r"
        ),
        agent=AgentIdentity(id="agent-1"),
        loop_type="react",
        model=model,
        provider=provider,
        created_at=now,
        updated_at=now,
        budget_usd=budget,
        parent_id=root_id,
        root_id=root_id,
    )
