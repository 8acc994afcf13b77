"""``synthorg mcp serve`` as a real process: unix socket + TCP, audited into the store."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp_servers import FetchHandler, serving
from mcp_world import _record
from typer.testing import CliRunner

from synthorg.cli.mcp import app
from synthorg.domain.binding import RunBinding
from synthorg.gateway.signer import GatewaySigner, load_or_create_key
from synthorg.mcp import McpToolClient
from synthorg.store.sqlite import SqliteStore


def _start(config: Path, uds: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from synthorg.cli.mcp import app; app()",
            "serve",
            "--config",
            str(config),
            "--port",
            "0",
            "--uds",
            str(uds),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("mcp listening on "):
        proc.kill()
        raise AssertionError(
            f"no listening line: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        )
    return proc, line.removeprefix("mcp listening on ").split(",")[0].strip()


@pytest.mark.slow
async def test_serve_command_serves_audits_and_stops_on_sigterm(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    key_path = tmp_path / "gateway.key"
    uds = Path(f"/tmp/synthorg-mcp-cli-{os.getpid()}-{time.monotonic_ns()}.sock")
    store = await SqliteStore.open(store_path)
    await store.create_conversation(_record("conv-cli", "alpha"))
    # The run's ledger row, as the run service opens it before minting the bearer.
    await store.open_execution(
        execution_id="e1",
        conversation_id="conv-cli",
        model="m",
        provider="p",
        cost_ceiling_usd=None,
    )
    ledger_id = store.ledger_id
    await store.close()
    with serving(FetchHandler, None) as fetch_url:
        config = tmp_path / "synthorg.toml"
        config.write_text(
            f'home = "{tmp_path / "home"}"\n'
            f'[store]\nurl = "{store_path}"\n'
            f'[gateway]\nsigning_key_file = "{key_path}"\n'
            '[[mcp.projects]]\nproject_id = "alpha"\n'
            f'[mcp.projects.fetch]\nallow = ["{fetch_url}/allowed/"]\n'
        )
        proc, url = _start(config, uds)
        try:
            # The server created the gateway key if absent; the gateway mints with it.
            signer = GatewaySigner(
                load_or_create_key(key_path), served=lambda p, m: True, max_ttl_s=3600
            )
            bearer = signer.mint(
                RunBinding(
                    execution_id="e1",
                    agent_id="a",
                    task_id="t",
                    project_id="alpha",
                    conversation_id="conv-cli",
                    provider="p",
                    model_id="m",
                ),
                ttl_s=60,
                ledger_id=ledger_id,
            )
            assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
            over_tcp = await McpToolClient(url, bearer).list_tools()
            assert len(over_tcp) == 6
            result = await McpToolClient("http://sandbox/mcp", bearer, uds=uds).call_tool(
                "http_fetch", {"url": f"{fetch_url}/allowed/hello"}
            )
            assert not result.is_error and "hello from the allow-list" in result.text
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.to_thread(proc.communicate, None, 15)
    assert proc.returncode == 0, err
    assert not uds.exists()
    store = await SqliteStore.open(store_path)
    try:
        stored = await store.history("conv-cli", kinds=frozenset({"tool_audit"}))
    finally:
        await store.close()
    # The intent, written before the fetch, then the outcome.
    assert [(s.event.tool, s.event.outcome) for s in stored] == [  # type: ignore[union-attr]
        ("http_fetch", "started"),
        ("http_fetch", "ok"),
    ]


def test_serve_refuses_a_config_without_projects(tmp_path: Path) -> None:
    config = tmp_path / "synthorg.toml"
    config.write_text(f'home = "{tmp_path}"\n')
    result = CliRunner().invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert "no [[mcp.projects]] configured" in result.output
