"""What the lease tests share: the run's bearer, and a gateway and an MCP server on loopback
that judge it over the run's store with the run's key (issue 29, finding 1).

The bearer is minted with the run's own claims and the shared key: what a gateway or the MCP
server decides depends only on the signature, the claims and the store, so it has exactly the
powers of the one the owning process held.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from synthorg.domain import ConversationStatus
from synthorg.domain.binding import RunBinding
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig, ProviderConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.mcp import CredentialVault, McpConfig, McpToolClient, create_mcp_app, serve_mcp
from synthorg.mcp.client import McpClientError
from synthorg.service.ownership import sweep_dead_owners
from synthorg.store import Store
from synthorg.store.protocol import ExecutionStatus
from tests.faults.harness import Proc, World

_DEADLINE_S = 120.0


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
    model: str
    gateway_url: str
    mcp_url: str
    page: str

    async def chat(self) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.gateway_url) as http:
            return await http.post(
                "/chat/completions",
                headers={"authorization": f"Bearer {self.bearer}"},
                json={"model": self.model, "messages": [{"role": "user", "content": "hi"}]},
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
async def boundaries(world: World, store: Store, conversation_id: str) -> AsyncIterator[Boundaries]:
    record = await store.get_conversation(conversation_id)
    assert record.execution_id is not None
    config = GatewayConfig(
        providers=[
            ProviderConfig(
                name=record.provider, kind="scripted", models=(record.model,), script="echo"
            )
        ],
        signing_key_file=world.home / "keys" / "gateway-signing.key",  # the run's key
    )
    signer = signer_for(config)
    binding = RunBinding.of(record, record.execution_id)
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
                yield Boundaries(
                    store, bearer, record.execution_id, record.model, gw.tcp_base_url, mcp.url, page
                )
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


ELSEWHERE = ("unshare", "--uts", "sh", "-c", 'hostname synthorg-elsewhere && exec "$0" "$@"')
"""The owner runs "on another host" (its own UTS namespace, same pid): nobody here can see
that it died from its pid, so only its lease can say so."""


async def _refused_at_the_lapse(run: Boundaries, killed_at: datetime, lease_s: float) -> datetime:
    """Once the killed owner's lease has lapsed (within ``lease_s`` of the kill: its last
    renewal came before it), the bearer is refused at the gateway and at the MCP server at
    once, while the conversation is still ``running``: nobody has reconciled it. The lapse."""
    row = await run.store.get_execution(run.execution_id)
    lapse = row.lease_expires_at
    assert lapse is not None
    assert lapse <= killed_at + timedelta(seconds=lease_s)
    # The lapse itself is what is tested: wait for that moment, then ask once.
    await asyncio.sleep(max((lapse - datetime.now(UTC)).total_seconds(), 0) + 0.05)
    refused = await run.chat()
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "execution_lapsed", refused.text
    for call in (run.fetch, run.push):
        text, failed = await call()
        assert failed and text.startswith("refused:"), text
        assert "lease ran out" in text, text
    record = await run.store.get_conversation(row.conversation_id)
    assert record.status is ConversationStatus.RUNNING  # no reader was involved
    return lapse


async def killed_then_lapsed_and_swept(
    run: Boundaries, owner: Proc, lease_s: float, label: str
) -> None:
    """The bearer acts while ``owner`` (the process holding the run) lives; SIGKILLed, its
    bearer is refused from the lapse of its lease (``_refused_at_the_lapse``), and a live
    process's periodic sweep (what every serve and worker runs) takes the conversation out of
    ``running`` with no reader, its execution killed. Prints the figures the report quotes."""
    assert (await run.chat()).status_code == 200  # alive: the bearer acts
    text, failed = await run.fetch()
    assert not failed and "fetched while alive" in text, text
    owner.proc.kill()
    killed_at = datetime.now(UTC)
    await owner.exit()
    lapse = await _refused_at_the_lapse(run, killed_at, lease_s)
    conversation_id = (await run.store.get_execution(run.execution_id)).conversation_id
    sweeper = asyncio.create_task(sweep_dead_owners(run.store, lease_s / 3))
    try:
        left_running = await _interrupted(run.store, conversation_id)
    finally:
        sweeper.cancel()
        await asyncio.wait([sweeper])
    print(
        f"{label}: lease lapsed {(lapse - killed_at).total_seconds():.2f} s after the kill; "
        f"swept {(left_running - lapse).total_seconds():.2f} s after the lapse"
    )
    closed = await run.store.get_execution(run.execution_id)
    assert closed.status is ExecutionStatus.KILLED, closed
