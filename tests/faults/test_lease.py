"""A killed run's bearer dies with its owner's lease, and the run is reconciled with no reader
(issue 29, finding 1).

A `synthorg run` (or the `synthorg serve` holding the run) is SIGKILLed mid-run. A gateway and
an MCP server with the same signing key over the same store, both on loopback HTTP, are shown
the run's bearer: accepted while the owner lives, refused from the moment the lease it renews
lapsed. A live process's periodic sweep (``sweep_dead_owners``, what every serve and worker
runs) takes the conversation out of ``running``: nobody reads it.

The bearer is minted here with the run's own claims and the shared key: what a gateway or the
MCP server decides depends only on the signature, the claims and the store, so it has exactly
the powers of the one the killed process held.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from synthorg.domain import ActionEvent, ConversationStatus, ObservationEvent
from synthorg.engine.bearers import RunGrant
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig, ProviderConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.signer import RunBinding
from synthorg.mcp import CredentialVault, McpConfig, McpToolClient, create_mcp_app, serve_mcp
from synthorg.mcp.client import McpClientError
from synthorg.service.ownership import sweep_dead_owners
from synthorg.store import Store, open_store
from synthorg.store.protocol import ExecutionStatus
from tests.faults.harness import Proc, World, synthorg

pytestmark = [pytest.mark.faults, pytest.mark.bwrap]

LEASE_S = 6.0
"""Short enough for a test, long enough that a loaded machine's stalls never lose a live lease
(renewed every 2 s)."""
_DEADLINE_S = 120.0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    extra = f"run_lease_s = {LEASE_S}\n"
    if request.param == "sqlite":
        return World(tmp_path, str(tmp_path / "store" / "store.db"), extra)
    url: str = request.getfixturevalue("pg_schema")
    return World(tmp_path, url, extra)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"fetched while alive"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def _page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Boundaries:
    """The run's bearer, and a gateway and an MCP server that judge it over the store."""

    store: Store
    bearer: str
    execution_id: str
    gateway_url: str
    mcp_url: str
    page: str

    async def chat(self) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.gateway_url) as http:
            return await http.post(
                "/chat/completions",
                headers={"authorization": f"Bearer {self.bearer}"},
                json={"model": "endless", "messages": [{"role": "user", "content": "hi"}]},
            )

    async def fetch(self) -> tuple[str, bool]:
        return await self._call("http_fetch", {"url": self.page})

    async def push(self) -> tuple[str, bool]:
        return await self._call("git_push", {})

    async def _call(self, tool: str, arguments: dict[str, object]) -> tuple[str, bool]:
        """The answer's text and whether it is an error (a refusal the client raises, when
        the server refuses the bearer already at listing, counts as one)."""
        try:
            result = await McpToolClient(self.mcp_url, self.bearer).call_tool(tool, arguments)
        except McpClientError as exc:
            return str(exc).split(": ", 1)[1], True
        return result.text, result.is_error


@asynccontextmanager
async def _boundaries(
    world: World, store: Store, conversation_id: str
) -> AsyncIterator[Boundaries]:
    record = await store.get_conversation(conversation_id)
    assert record.execution_id is not None
    config = GatewayConfig(
        providers=[
            ProviderConfig(name="scripted", kind="scripted", models=("endless",), script="echo")
        ],
        signing_key_file=world.home / "keys" / "gateway-signing.key",  # the run's key
    )
    signer = signer_for(config)
    binding = RunBinding(**asdict(RunGrant.of(record, record.execution_id)))
    bearer = signer.mint(binding, ttl_s=600, ledger_id=store.ledger_id)
    with _page() as page:
        mcp_config = McpConfig.model_validate(
            {
                "projects": [
                    {
                        "project_id": record.task.project_id,
                        "fetch": {"allow": [{"url": page, "allow_private": True}]},
                    }
                ]
            }
        )
        mcp_app = create_mcp_app(mcp_config, signer, CredentialVault.from_config(mcp_config), store)
        gateway_app = create_gateway_app(config, signer, store)
        try:
            async with (
                serve_embedded(gateway_app, tcp_port=0) as gw,
                serve_mcp(mcp_app, host="127.0.0.1") as mcp,
            ):
                assert gw.tcp_base_url and mcp.url
                yield Boundaries(store, bearer, record.execution_id, gw.tcp_base_url, mcp.url, page)
        finally:
            await gateway_app.gateway.aclose()


async def _interrupted(store: Store, conversation_id: str) -> datetime:
    """When the conversation left ``running`` (its StatusChangeEvent's time), waited for with
    a bounded deadline."""
    deadline = time.monotonic() + _DEADLINE_S
    while True:
        record = await store.get_conversation(conversation_id)
        if record.status is not ConversationStatus.RUNNING:
            break
        assert time.monotonic() < deadline, "the conversation stayed running"
        await asyncio.sleep(0.2)
    assert record.status is ConversationStatus.INTERRUPTED, record.status
    history = await store.history(conversation_id, limit=10_000)
    changes = [s for s in history if getattr(s.event, "new", None) is record.status]
    return changes[-1].timestamp


_ELSEWHERE = ("unshare", "--uts", "sh", "-c", 'hostname synthorg-elsewhere && exec "$0" "$@"')
"""The owner runs "on another host" (its own UTS namespace, same pid): nobody here can see
that it died from its pid, so only its lease can say so."""


async def _start_holder(world: World, holder: str, repo: Path) -> tuple[Proc, Proc | None]:
    """The process that will own the run: `synthorg run` itself, or a serve it hands it to."""
    if holder == "run":
        return await synthorg(world, *_ENDLESS, str(repo), prefix=_ELSEWHERE), None
    serve = await synthorg(
        world, "serve", "--port", "0", prefix=_ELSEWHERE, env={"SYNTHORG_LOG_LEVEL": "INFO"}
    )
    ready = serve.watch("SERVER_STARTED")
    await asyncio.wait_for(ready.wait(), 300)  # its local socket listens: runs go to it
    return await synthorg(world, *_ENDLESS, str(repo)), serve


_ENDLESS = ("run", "keep going", "--model", "endless", "--max-turns", "9999", "--repo")


@pytest.mark.parametrize("holder", ["run", "serve"])
async def test_a_killed_owners_bearer_dies_with_its_lease_and_the_run_is_swept(
    world: World, holder: str
) -> None:
    client, serve = await _start_holder(world, holder, world.repo("r"))
    owner = serve or client
    acting = client.watch("▶ terminal")
    conversation = await client.conversation_id()
    await asyncio.wait_for(acting.wait(), 300)  # inside its run: the lease is being renewed

    store = await open_store(world.store_url)
    sweeper: asyncio.Task[None] | None = None
    try:
        async with _boundaries(world, store, conversation) as run:
            assert (await run.chat()).status_code == 200  # alive: the bearer acts
            text, failed = await run.fetch()
            assert not failed and "fetched while alive" in text, text

            owner.proc.kill()
            killed_at = datetime.now(UTC)
            await owner.exit()
            row = await store.get_execution(run.execution_id)
            assert row.lease_expires_at is not None
            # The last renewal came before the kill, so the lease ends within LEASE_S of it.
            assert row.lease_expires_at <= killed_at + timedelta(seconds=LEASE_S)
            wait_s = (row.lease_expires_at - datetime.now(UTC)).total_seconds()
            await asyncio.sleep(max(wait_s, 0) + 0.05)  # the lapse itself is what is tested

            # From the lapse on, refused at once, with nobody having reconciled anything.
            refused = await run.chat()
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "execution_lapsed", refused.text
            for call in (run.fetch, run.push):
                text, failed = await call()
                assert failed and text.startswith("refused:"), text
                assert "lease ran out" in text, text
            still = await store.get_conversation(conversation)
            assert still.status is ConversationStatus.RUNNING  # no reader was involved

            # A live SynthOrg process sweeps (every serve and worker runs this task).
            sweeper = asyncio.create_task(sweep_dead_owners(store, LEASE_S / 3))
            left_running = await _interrupted(store, conversation)
            print(  # the figures the report quotes
                f"{holder}: lease lapsed {(row.lease_expires_at - killed_at).total_seconds():.2f}"
                f" s after the kill; swept "
                f"{(left_running - row.lease_expires_at).total_seconds():.2f} s after the lapse"
            )
            closed = await store.get_execution(run.execution_id)
            assert closed.status is ExecutionStatus.KILLED, closed
            events = [s.event for s in await store.history(conversation, limit=10_000)]
            actions = [e.action_id for e in events if isinstance(e, ActionEvent)]
            answered = [e.action_id for e in events if isinstance(e, ObservationEvent)]
            assert actions and sorted(answered) == sorted(actions)  # each answered once
            record = await store.get_conversation(conversation)
            assert f"pid {owner.proc.pid} on synthorg-elsewhere" in (record.error or "")
            assert await store.conversation_owner(conversation) is None
            for call in (run.fetch, run.push):  # killed now: refused for good
                text, failed = await call()
                assert failed and "was killed" in text, text

            # Resume (finding 3): the new execution gets its own bearer; the old one stays dead.
            resumed = await synthorg(world, "run", "--resume", conversation)
            acting = resumed.watch("▶ terminal")
            await asyncio.wait_for(acting.wait(), 300)
            async with _boundaries(world, store, conversation) as again:
                assert again.execution_id != run.execution_id
                assert (await again.chat()).status_code == 200
                text, failed = await again.fetch()
                assert not failed and "fetched while alive" in text, text
                old = await run.chat()
                assert old.status_code == 403, old.text
                assert old.json()["error"]["code"] == "execution_killed", old.text
                text, failed = await run.fetch()
                assert failed and "was killed" in text, text
            resumed.proc.kill()
            await resumed.exit()
    finally:
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.wait([sweeper])
        await store.close()
    if client.proc.returncode is None:
        client.proc.kill()
    await client.exit()
