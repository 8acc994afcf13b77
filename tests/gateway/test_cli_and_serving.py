"""Standalone serving (CLI subprocess, TCP + unix socket), embedding, metrics and the access log."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx
import openai
import pytest
from typer.testing import CliRunner

from synthorg.cli.gateway import app as gateway_cli
from synthorg.cli.gateway import gateway_config
from synthorg.errors import NotFoundError
from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.embedded import serve_embedded
from synthorg.settings import load_settings
from synthorg.store import open_store
from synthorg.store.protocol import ExecutionStatus, ExecutionUsage
from tests.support import free_port

from .harness import UPSTREAM_MODEL, Harness

CONFIG = """
home = "{home}"

[gateway]
token_ttl_s = 120

[[gateway.providers]]
name = "scripted"
kind = "scripted"
models = ["scripted-demo", "echo-model"]
script = "echo"

[gateway.prices.echo-model]
input_per_mtok_usd = 10
output_per_mtok_usd = 20
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "synthorg.toml"
    path.write_text(CONFIG.format(home=tmp_path / "home"))
    return path


def test_mint_prints_a_bearer_and_refuses_unbound_models(tmp_path: Path) -> None:
    runner = CliRunner()
    config = _config(tmp_path)
    result = runner.invoke(
        gateway_cli,
        [
            "mint",
            "--model",
            "echo-model",
            "--ceiling",
            "0.5",
            "--json",
            "--execution",
            "exec-cli",
            "--config",
            str(config),
        ],
    )
    assert result.exit_code == 0, result.output
    minted = json.loads(result.stdout)
    assert minted["provider"] == "scripted" and minted["execution_id"] == "exec-cli"
    assert minted["bearer"].count(".") == 2
    assert (tmp_path / "home" / "keys" / "gateway-signing.key").exists()
    result = runner.invoke(gateway_cli, ["mint", "--model", "gpt-4o", "--config", str(config)])
    assert result.exit_code != 0
    assert "no configured provider serves model 'gpt-4o'" in " ".join(result.output.split())
    result = runner.invoke(
        gateway_cli,
        ["mint", "--model", "echo-model", "--provider", "other", "--config", str(config)],
    )
    assert result.exit_code != 0 and "not served by provider" in result.output


def test_mint_refuses_a_ttl_past_the_configured_one(tmp_path: Path) -> None:
    """Issue 29 (7): `mint --ttl` accepted 100 years while `token_ttl_s = 120`."""
    config = _config(tmp_path)
    runner = CliRunner()
    base = ["mint", "--model", "echo-model", "--config", str(config), "--ttl"]
    for absurd in (str(100 * 365 * 86_400), "121", "-5", "0"):  # 0 was taken as the default
        result = runner.invoke(gateway_cli, [*base, absurd])
        assert result.exit_code != 0, (absurd, result.output)
        assert "between 1 and 120 s" in " ".join(result.output.split()), result.output
    assert runner.invoke(gateway_cli, [*base, "120"]).exit_code == 0


def test_mint_issues_the_way_a_run_does_and_a_refused_one_opens_no_row(tmp_path: Path) -> None:
    """Issue 35 (3): `mint` goes through Gateway.issue, the run service's one path: the row is
    opened in the store, owned by no run (no lease ends it before its lifetime); a refused
    lifetime opens none."""
    config, runner = _config(tmp_path), CliRunner()
    base = ["mint", "--model", "echo-model", "--config", str(config), "--execution"]
    assert runner.invoke(gateway_cli, [*base, "exec-ok", "--ceiling", "0.5"]).exit_code == 0
    assert runner.invoke(gateway_cli, [*base, "exec-refused", "--ttl", "0"]).exit_code != 0

    async def rows() -> ExecutionUsage:
        store = await open_store(tmp_path / "home" / "store.db")
        try:
            with pytest.raises(NotFoundError):
                await store.get_execution("exec-refused")
            return await store.get_execution("exec-ok")
        finally:
            await store.close()

    row = asyncio.run(rows())
    assert row.status == ExecutionStatus.ACTIVE and row.cost_ceiling_usd == Decimal("0.5")
    assert row.lease_expires_at is None and row.conversation_id.startswith("conv-manual-")


def test_a_minted_bearer_acts_only_at_its_own_store(tmp_path: Path) -> None:
    """`mint` opens the execution in the configured store and names that store in the bearer;
    a gateway with the same key over another store refuses it (issue 29, 2)."""
    config = _config(tmp_path)
    result = CliRunner().invoke(
        gateway_cli, ["mint", "--model", "echo-model", "--json", "--config", str(config)]
    )
    assert result.exit_code == 0, result.output
    bearer = json.loads(result.stdout)["bearer"]
    gw_config = gateway_config(load_settings(config))

    async def answer(store_path: Path) -> httpx.Response:
        store = await open_store(store_path)
        try:
            app = create_gateway_app(gw_config, signer_for(gw_config), store)
            async with (
                serve_embedded(app, tcp_port=0) as gw,
                httpx.AsyncClient(base_url=f"{gw.tcp_base_url}") as http,
            ):
                response = await http.post(
                    "/chat/completions",
                    headers={"authorization": f"Bearer {bearer}"},
                    json={"model": "echo-model", "messages": [{"role": "user", "content": "x"}]},
                )
            await app.gateway.aclose()
        finally:
            await store.close()
        return response

    own = asyncio.run(answer(tmp_path / "home" / "store.db"))
    assert own.status_code == 200, own.text
    other = asyncio.run(answer(tmp_path / "other.db"))
    assert other.status_code == 401, other.text
    assert "issued by ledger" in other.json()["error"]["message"]


@pytest.mark.slow
async def test_serve_subprocess_over_tcp_and_unix_socket(tmp_path: Path) -> None:
    config = _config(tmp_path)
    port, uds = free_port(), tmp_path / "gw.sock"
    # `mint` opens the execution in the store (its own event loop): off this test's loop.
    minted = await asyncio.to_thread(
        CliRunner().invoke, gateway_cli, ["mint", "--model", "echo-model", "--config", str(config)]
    )
    token = minted.stdout.strip()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from synthorg.cli.gateway import app; app()",
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
            "--uds",
            str(uds),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # ready once /health answers on TCP (the UDS file exists a bit earlier)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "gateway did not start"
            try:
                async with httpx.AsyncClient() as probe:
                    if (await probe.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                        break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
        assert uds.exists()
        async with openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0
        ) as client:
            reply = await client.chat.completions.create(
                model="openai/echo-model", messages=[{"role": "user", "content": "over tcp"}]
            )
        assert reply.choices[0].message.content == "echo: over tcp"
        transport = httpx.AsyncHTTPTransport(uds=str(uds))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway/v1") as http:
            response = await http.post(
                "/chat/completions",
                headers={"authorization": f"Bearer {token}"},
                json={"model": "echo-model", "messages": [{"role": "user", "content": "uds"}]},
            )
            assert response.status_code == 200
            assert response.json()["choices"][0]["message"]["content"] == "echo: uds"
            metrics = (await http.get("http://gateway/metrics")).text
        answered = 'requests_total{model="echo-model",provider="scripted",status="200"} 2.0'
        assert answered in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr.decode()
    assert not uds.exists(), "the unix socket is removed on shutdown"
    access = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    assert [a["model"] for a in access] == ["echo-model", "echo-model"]
    assert all(a["tokens_out"] > 0 and float(a["cost_usd"]) > 0 for a in access)


async def test_embedded_serves_tcp_and_uds_at_once(harness: Harness, tmp_path: Path) -> None:
    _, token = await harness.run()
    uds = tmp_path / "embedded.sock"
    async with serve_embedded(harness.app, uds=uds, tcp_port=0) as endpoints:
        assert endpoints.tcp_base_url and endpoints.uds_path == uds
        assert oct(uds.stat().st_mode & 0o777) == "0o600"
        transport = httpx.AsyncHTTPTransport(uds=str(uds))
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
        async with openai.AsyncOpenAI(
            base_url=endpoints.tcp_base_url, api_key=token, max_retries=0
        ) as client:
            reply = await client.chat.completions.create(
                model=UPSTREAM_MODEL, messages=[{"role": "user", "content": "x"}]
            )
            assert reply.choices[0].message.tool_calls
    assert not uds.exists()


async def test_metrics_and_access_log(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    binding, token = await harness.run()
    caplog.set_level(logging.INFO, logger="synthorg.gateway.access")
    async with harness.client(token) as client:
        await client.chat.completions.create(
            model=UPSTREAM_MODEL, messages=[{"role": "user", "content": "x"}]
        )
        with pytest.raises(openai.PermissionDeniedError):
            await client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "x"}]
            )
    records = [json.loads(r.message) for r in caplog.records if r.name == "synthorg.gateway.access"]
    assert len(records) == 1
    record = records[0]
    assert record["execution_id"] == binding.execution_id and record["model"] == UPSTREAM_MODEL
    assert record["tokens_in"] > 0 and record["tokens_out"] > 0 and record["latency_ms"] > 0
    usage = await harness.gateway.usage(binding.execution_id)
    assert record["cost_usd"] == str(usage.cost_usd)
    async with httpx.AsyncClient(base_url=harness.base_url.removesuffix("/v1")) as http:
        text = (await http.get("/metrics")).text
    assert 'synthorg_gateway_refusals_total{code="model_mismatch"} 1.0' in text
    assert f'synthorg_gateway_tokens_total{{direction="out",model="{UPSTREAM_MODEL}"}}' in text
    assert "synthorg_gateway_request_seconds_bucket" in text
