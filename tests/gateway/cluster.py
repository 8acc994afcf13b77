"""Gateways in separate processes sharing one PostgreSQL ledger, in front of one upstream.

The test process serves the upstream (a ``FakeUpstream`` that can hold chosen requests), opens
runs and mints bearers with a gateway of its own that serves nothing; each worker gateway is a
``gateway_proc`` process (the gateway as ``synthorg run``/``serve`` embed it) or a standalone
``synthorg gateway serve``, with its own connections to the database and its own HTTP port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import httpx
import tomlkit

from synthorg.domain.binding import RunBinding
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.service import Gateway
from synthorg.gateway.wire import ChatRequest
from synthorg.store import StoreConfig, open_store
from synthorg.store.protocol import ExecutionUsage, Store

from .fake_upstream import FakeUpstream
from .harness import FAKE_MODEL, fake_config, tree_conversation

REPO = Path(__file__).resolve().parents[2]

Scope = MutableMapping[str, Any]
GatewayKind = Literal["embedded", "standalone"]


class HeldUpstream:
    """The FakeUpstream, except that a request whose first message starts with a nonce in
    ``held`` is answered only once ``release`` is set; ``arrived`` has every nonce received."""

    def __init__(self) -> None:
        self.fake = FakeUpstream()
        self.held: set[str] = set()
        self.release = asyncio.Event()
        self.arrived: set[str] = set()
        self.changed = asyncio.Condition()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.fake(scope, receive, send)
            return
        first = await receive()
        body = first.get("body", b"")
        while first.get("more_body"):
            first = await receive()
            body += first.get("body", b"")
        nonce = _nonce(body)
        async with self.changed:
            self.arrived.add(nonce)
            self.changed.notify_all()
        if nonce in self.held:
            await self.release.wait()
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.fake(scope, replay, send)

    async def wait_arrived(self, nonce: str) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: nonce in self.arrived)


def _nonce(body: bytes) -> str:
    content = json.loads(body)["messages"][0]["content"]
    return str(content).split(" ", 1)[0]


@dataclass
class Cluster:
    """Worker gateways (``bases[i]`` is worker i's base URL) and the test's own handles."""

    home: Path
    store: Store
    gateway: Gateway
    upstream: HeldUpstream
    store_url: str
    config_file: Path
    kind: GatewayKind = "embedded"
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)

    def http(self, worker: int, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.bases[worker],
            headers={"authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(120.0),
        )

    def worst(self, body: dict[str, Any]) -> Decimal:
        """What a worker gateway reserves for ``body`` (the same estimate, made here)."""
        request = ChatRequest.model_validate(body)
        return self.gateway.bounds(self.gateway.forwarded(request, FAKE_MODEL)).worst

    async def open_run(self, conversation_id: str, ceiling: Decimal | None) -> tuple[str, str]:
        """Open an execution of ``conversation_id`` and mint its bearer: (execution id, bearer)."""
        binding = RunBinding(
            execution_id=f"exec-{secrets.token_hex(5)}",
            agent_id="agent-1",
            task_id="task-1",
            project_id="proj",
            conversation_id=conversation_id,
            provider="fake",
            model_id=FAKE_MODEL,
            cost_ceiling=ceiling,
        )
        return binding.execution_id, await self.gateway.issue(binding)

    async def conversation(self, budget: Decimal | None, root_id: str | None = None) -> str:
        """Save a conversation (a tree's root with ``budget``, or a child of ``root_id``)."""
        record = tree_conversation(budget, root_id)
        await self.store.create_conversation(record)
        return record.id

    async def ledger(self, execution_ids: list[str], requests: int) -> list[ExecutionUsage]:
        """The runs' ledger rows once ``requests`` requests are written (workers write after
        answering)."""
        async with asyncio.timeout(120):
            while True:
                rows = [await self.store.get_execution(e) for e in execution_ids]
                if sum(row.requests for row in rows) >= requests:
                    return rows
                await asyncio.sleep(0.05)  # polling the ledger another process writes

    async def spawn(self, workers: int) -> None:
        """Start ``workers`` more worker gateways (``bases`` grows by as many)."""
        started = []
        if self.kind == "embedded":
            args = ["-m", "tests.gateway.gateway_proc", self.store_url, str(self.config_file)]
        else:
            cli = str(Path(sys.executable).with_name("synthorg"))
            args = [cli, "gateway", "serve", "--config", str(self.toml())]
        for _ in range(workers):
            proc = await asyncio.create_subprocess_exec(
                *([sys.executable, *args] if self.kind == "embedded" else args),
                cwd=REPO,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            self.procs.append(proc)
            started.append(proc)
        async with asyncio.timeout(300):  # imports take long on a loaded machine
            for proc in started:
                assert proc.stdout is not None
                self.bases.append(await _ready(proc.stdout))

    def toml(self) -> Path:
        """The settings file of a standalone ``synthorg gateway serve`` on this store."""
        config = json.loads(self.config_file.read_text())
        settings = {
            "home": str(self.home),
            "store": {"url": self.store_url},
            "gateway": _no_nulls(config) | {"port": 0},
        }
        path = self.home / "gateway.toml"
        path.write_text(tomlkit.dumps(settings))
        return path

    async def stop(self, worker: int) -> None:
        """Stop worker ``worker`` gracefully (its requests in flight are answered and written)."""
        proc = self.procs[worker]
        if proc.returncode is None and self.kind == "standalone":
            proc.terminate()  # the CLI serves until SIGTERM / SIGINT
        elif proc.returncode is None and proc.stdin is not None:
            proc.stdin.close()
        async with asyncio.timeout(60):
            await proc.wait()


def _no_nulls(value: Any) -> Any:
    """``value`` without its None entries (TOML has no null: absent means the default)."""
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


async def _ready(stdout: asyncio.StreamReader) -> str:
    """The base URL a worker prints once it serves: ``ready <url>`` (gateway_proc) or
    ``gateway listening on <url>`` (``synthorg gateway serve``)."""
    while True:
        line = (await stdout.readline()).decode()
        assert line, "the worker gateway exited before serving"
        words = line.split()
        if words[:1] == ["ready"]:
            return words[1]
        if "listening on" in line:
            return line.split("listening on", 1)[1].split(",")[0].strip()


@contextlib.asynccontextmanager
async def cluster(
    home: Path,
    store_url: str,
    workers: int,
    *,
    lease_s: float = 30.0,
    kind: GatewayKind = "embedded",
) -> AsyncIterator[Cluster]:
    """``workers`` gateway processes of ``kind`` on the store at ``store_url``, one upstream,
    one key."""
    upstream = HeldUpstream()
    store = await open_store(StoreConfig(url=store_url))
    try:
        async with serve_embedded(upstream, tcp_port=0) as up:
            assert up.tcp_base_url
            config = fake_config(home, up.tcp_base_url, reservation_lease_s=lease_s)
            app = create_gateway_app(config, signer_for(config), store)  # writes the key first
            config_file = home / "gateway.json"
            config_file.write_text(config.model_dump_json())
            world = Cluster(home, store, app.gateway, upstream, store_url, config_file, kind)
            try:
                await world.spawn(workers)
                yield world
            finally:
                upstream.release.set()
                for proc in world.procs:
                    if proc.returncode is None:
                        proc.kill()
                    await proc.wait()
                await app.gateway.aclose()
    finally:
        await store.close()
