"""Per-turn control-plane overhead of the native react loop vs a minimal in-process loop.

Both run the same 50-turn scripted model (the progress script: one shell command per turn,
then finish) in the same process, in the same run of this script:

- native: the real stack. LoopRunner + SQLite store (durable append of every event) + the
  checkers, the embedded gateway on its unix socket (bearer check, admission, metering,
  ledger), the HTTP model client, tool-call validation, and the commands run by the stdlib
  toolbox inside a bubblewrap sandbox. A second native run reaches the gateway over
  loopback TCP instead.
- mini-swe-agent (the peer, 2.4.6 in its own venv): its ``DefaultAgent`` with its
  ``LocalEnvironment`` and its ``DeterministicModel`` replaying the same commands, then its
  submit command; no durable log, gateway, metering or sandbox.
- baseline: a bare loop calling the same script function directly and running the same
  commands with subprocess.run.

Overhead per turn = (wall time - time inside the scripted model - time the commands ran) /
turns. The command time is measured where the command runs (inside the sandbox for native,
around subprocess.run for the baseline), so IPC and sandbox hops count as overhead.

    uv run python benchmarks/loop_overhead_bench.py [--turns 50] [--repeats 3]
        [--peer-venv ~/.cache/synthorg-bench/mini-swe-agent]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai

from synthorg.domain import AgentIdentity, ConversationRecord, Task, TokenUsage, WorkspaceInfo
from synthorg.domain.binding import RunBinding
from synthorg.engine import LoopRunner, RunCheckers, RunControl, budget_checker, flag_checker
from synthorg.engine.native import NativeLoopDeps, OpenAICompatClient, ReactLoop
from synthorg.engine.native.scripts import progress_script
from synthorg.engine.protocol import GatewayAccess, LoopContext
from synthorg.gateway.app import GatewayApp
from synthorg.gateway.config import GatewayConfig, ModelPrice, ProviderConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import ScriptedModel, ScriptedTurn
from synthorg.gateway.service import Gateway
from synthorg.gateway.signer import GatewaySigner
from synthorg.gateway.wire import ChatMessage
from synthorg.sandbox import BwrapSandbox, SandboxRequest, ToolboxClient
from synthorg.store import open_store

MODEL = "bench-model"


class Timed:
    """A scripted model that adds up the time spent inside it."""

    def __init__(self, script: ScriptedModel) -> None:
        self.script, self.seconds, self.calls = script, 0.0, 0

    def __call__(self, messages: Sequence[ChatMessage], tools: Any) -> ScriptedTurn:
        started = time.perf_counter()
        try:
            return self.script(messages, tools)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


class Stopwatch:
    """Adds up the time spent awaiting wrapped coroutines, by label."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, label: str, fn: Any) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                self.seconds[label] = self.seconds.get(label, 0.0) + spent

        return timed


class TimedToolbox:
    """The toolbox client, adding up the duration the sandbox reports for each command."""

    def __init__(self, client: ToolboxClient) -> None:
        self._client, self.seconds = client, 0.0

    @property
    def workspace(self) -> str:
        return self._client.workspace

    async def run(self, command: str, timeout_s: float = 120.0, max_output: int = 100_000) -> Any:
        result = await self._client.run(command, timeout_s, max_output)
        self.seconds += result.duration_s
        return result

    async def edit(self, command: Any, path: str, **kwargs: Any) -> Any:
        return await self._client.edit(command, path, **kwargs)


async def native_run(tmp: Path, turns: int, transport: str) -> dict[str, float]:
    repo = tmp / f"native-{transport}"
    repo.mkdir()
    store = await open_store(tmp / f"store-{transport}.db")
    provider = ScriptedProvider({})
    script = Timed(progress_script(turns))
    provider.set_script(MODEL, script)
    price = ModelPrice(input_per_mtok_usd=Decimal(3), output_per_mtok_usd=Decimal(15))
    config = GatewayConfig(
        providers=[
            ProviderConfig(name="scripted", kind="scripted", models=(MODEL,), script="echo")
        ],
        prices={MODEL: price},
        signing_key_file=tmp / "key",
    )
    gateway = Gateway(
        config,
        GatewaySigner(secrets.token_bytes(32), served=config.serves, max_ttl_s=config.token_ttl_s),
        store,
        {"scripted": provider},
    )
    cid, now = f"conv-{secrets.token_hex(4)}", datetime.now(UTC)
    task = Task(id="t", project_id="p", prompt="write the numbers", repository=str(repo))
    agent = AgentIdentity(id="a")
    await store.create_conversation(
        ConversationRecord(
            id=cid,
            task=task,
            agent=agent,
            loop_type="react",
            model=MODEL,
            provider="scripted",
            created_at=now,
            updated_at=now,
            max_turns=turns + 5,
        )
    )
    binding = RunBinding(
        execution_id=f"exec-{secrets.token_hex(4)}",
        agent_id="a",
        task_id="t",
        project_id="p",
        conversation_id=cid,
        provider="scripted",
        model_id=MODEL,
    )
    bearer = await gateway.issue(binding)

    watch = Stopwatch()

    async def usage() -> TokenUsage:
        row = await gateway.usage(binding.execution_id)
        return TokenUsage(tokens_in=row.tokens_in, tokens_out=row.tokens_out, cost_usd=row.cost_usd)

    runner, control = LoopRunner(store), RunControl()
    checkers = RunCheckers(
        task_cancellation=flag_checker(asyncio.Event()),
        shutdown=flag_checker(asyncio.Event()),
        budget=budget_checker(usage, Decimal(100)),
    )
    try:
        uds = tmp / f"gw-{transport}.sock"
        async with serve_embedded(GatewayApp(gateway), tcp_port=0, uds=uds) as endpoints:
            assert endpoints.tcp_base_url is not None
            base_url = endpoints.tcp_base_url if transport == "tcp" else "http://localhost/v1"

            def model_client(access: GatewayAccess, model: str, _: Any) -> OpenAICompatClient:
                over = httpx.AsyncHTTPTransport(uds=str(uds)) if transport == "uds" else None
                client = OpenAICompatClient(access.base_url, access.bearer, model, transport=over)
                client.complete = watch.wrap("model call", client.complete)  # type: ignore[method-assign]
                return client

            request = SandboxRequest(argv=["toolbox"], workspace=repo, conversation_id=cid)
            async with ToolboxClient(BwrapSandbox(), request) as client:
                toolbox = TimedToolbox(client)
                toolbox.run = watch.wrap("toolbox call", toolbox.run)  # type: ignore[method-assign]
                context = LoopContext(
                    task=task,
                    agent=agent,
                    conversation_id=cid,
                    execution_id=binding.execution_id,
                    model=MODEL,
                    provider="scripted",
                    workspace=WorkspaceInfo(path=str(repo)),
                    gateway=GatewayAccess(base_url, bearer, watch.wrap("loop usage probe", usage)),
                    emit=watch.wrap("sink: append + checkers", runner.sink(cid, checkers, control)),
                    control=control,
                    max_turns=turns + 5,
                )
                deps = NativeLoopDeps(
                    executor=toolbox,  # type: ignore[arg-type]
                    model_client_factory=model_client,
                )
                loop = ReactLoop(deps)
                started = time.perf_counter()
                result = await runner.run(loop, context)
                wall = time.perf_counter() - started
            assert result.termination_reason == "completed", result.error
            lines = (repo / "progress.txt").read_text().split()
            assert lines == [str(n) for n in range(1, turns + 1)]
            calls = await client_cost(base_url, uds if transport == "uds" else None, bearer)
    finally:
        await store.close()
    return {
        "wall": wall,
        "model": script.seconds,
        "tools": toolbox.seconds,
        "turns": len(result.turns),
        **{f"part:{k}": v for k, v in watch.seconds.items()},
        **calls,
    }


async def client_cost(base_url: str, uds: Path | None, bearer: str) -> dict[str, float]:
    """Mean wall time per chat call: our httpx client vs the openai SDK, same gateway."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "count"}]

    def over() -> httpx.AsyncHTTPTransport | None:
        return httpx.AsyncHTTPTransport(uds=str(uds)) if uds else None

    ours = OpenAICompatClient(base_url, bearer, MODEL, transport=over())
    sdk = openai.AsyncOpenAI(
        base_url=base_url,
        api_key=bearer,
        max_retries=0,
        http_client=httpx.AsyncClient(trust_env=False, transport=over()),
    )
    n = 200
    try:
        for _ in range(20):  # warm both
            await ours.complete(messages, [])
            await sdk.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
        started = time.perf_counter()
        for _ in range(n):
            await ours.complete(messages, [])
        httpx_s = (time.perf_counter() - started) / n
        started = time.perf_counter()
        for _ in range(n):
            await sdk.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
        sdk_s = (time.perf_counter() - started) / n
    finally:
        await ours.aclose()
        await sdk.close()
    return {"httpx_call": httpx_s, "sdk_call": sdk_s}


def baseline_run(tmp: Path, turns: int) -> dict[str, float]:
    """The same script and commands, with nothing around them."""
    repo = tmp / "baseline"
    repo.mkdir()
    script = Timed(progress_script(turns))
    messages = [ChatMessage(role="user", content="write the numbers")]
    tool_s, n = 0.0, 0
    started = time.perf_counter()
    while True:
        turn = script(messages, None)
        call = turn.tool_calls[0]
        args = dict(call.arguments) if isinstance(call.arguments, Mapping) else {}
        n += 1
        call_id = f"call_{n}"
        messages.append(
            ChatMessage(
                role="assistant",
                content=turn.text,
                tool_calls=[
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(args)},
                    }
                ],
            )
        )
        if call.name == "finish":
            break
        t0 = time.perf_counter()
        proc = subprocess.run(
            ["bash", "-c", args["command"]], cwd=repo, capture_output=True, text=True, timeout=60
        )
        tool_s += time.perf_counter() - t0
        messages.append(
            ChatMessage(
                role="tool",
                tool_call_id=call_id,
                content=proc.stdout + f"\n[exit code: {proc.returncode}]",
            )
        )
    wall = time.perf_counter() - started
    return {"wall": wall, "model": script.seconds, "tools": tool_s, "turns": n}


PEER = "mini-swe-agent==2.4.6"

# Runs in the peer's venv: argv = repo, turns. Prints the same figures as the other runs.
PEER_RUN = """
import json, sys, time
from pathlib import Path
import yaml
import minisweagent
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments import local
from minisweagent.models.test_models import DeterministicModel, make_output

repo, turns = sys.argv[1], int(sys.argv[2])
config = yaml.safe_load((Path(minisweagent.__file__).parent / "config/default.yaml").read_text())
outputs = [
    make_output(f"Line {n}.", [{"command": f"echo {n} >> progress.txt && echo confirmed-{n}"}])
    for n in range(1, turns + 1)
] + [make_output("Done.", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}])]
model = DeterministicModel(outputs=outputs)
spent = {"model": 0.0, "tools": 0.0}
query, run = model.query, local._run
def timed_query(*a, **k):
    t = time.perf_counter()
    try:
        return query(*a, **k)
    finally:
        spent["model"] += time.perf_counter() - t
def timed_run(*a, **k):
    t = time.perf_counter()
    try:
        return run(*a, **k)
    finally:
        spent["tools"] += time.perf_counter() - t
model.query, local._run = timed_query, timed_run
agent = DefaultAgent(model, local.LocalEnvironment(cwd=repo), **config["agent"])
started = time.perf_counter()
result = agent.run("write the numbers 1..N to progress.txt, one per line")
wall = time.perf_counter() - started
assert result["exit_status"] == "Submitted", result
assert Path(repo, "progress.txt").read_text().split() == [str(n) for n in range(1, turns + 1)]
print(json.dumps({"wall": wall, **spent, "turns": model.current_index + 1}))
"""


def ensure_peer(venv: Path) -> Path:
    """The peer's interpreter, installing mini-swe-agent in its own venv on first use."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    uv = shutil.which("uv") or sys.exit("uv is needed to install the peer's venv")
    base = os.path.realpath(sys.executable)  # no interpreter download: no internet here
    subprocess.run([uv, "venv", "-q", str(venv), "--python", base], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(python), PEER], check=True)
    return python


def peer_run(tmp: Path, turns: int, python: Path) -> dict[str, float]:
    """mini-swe-agent's own loop on the same commands, in its venv."""
    repo = tmp / "peer"
    repo.mkdir()
    done = subprocess.run(
        [str(python), "-c", PEER_RUN, str(repo), str(turns)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def overhead_ms(run: Mapping[str, float]) -> float:
    return (run["wall"] - run["model"] - run["tools"]) / run["turns"] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--peer-venv",
        type=Path,
        default=Path.home() / ".cache" / "synthorg-bench" / "mini-swe-agent",
    )
    args = parser.parse_args()
    peer_python = ensure_peer(args.peer_venv)
    peers: list[dict[str, float]] = []
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    natives: list[dict[str, float]] = []
    tcps: list[dict[str, float]] = []
    baselines: list[dict[str, float]] = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            os.dup2(devnull, 2)  # the runs log at INFO as in production; keep the terminal clean
            try:
                natives.append(await native_run(Path(tmp), args.turns, "uds"))
                tcps.append(await native_run(Path(tmp), args.turns, "tcp"))
                baselines.append(baseline_run(Path(tmp), args.turns))
                peers.append(peer_run(Path(tmp), args.turns, peer_python))
            finally:
                os.dup2(saved, 2)
    native = statistics.median(overhead_ms(r) for r in natives)
    tcp = statistics.median(overhead_ms(r) for r in tcps)
    base = statistics.median(overhead_ms(r) for r in baselines)
    peer = statistics.median(overhead_ms(r) for r in peers)
    best = min(natives, key=overhead_ms)
    print(
        f"turns per run: {int(best['turns'])} (native), {int(baselines[0]['turns'])} (baseline)"
        f"; repeats: {args.repeats}"
    )
    rows = (("native", natives), ("tcp", tcps), ("mini-swe", peers), ("baseline", baselines))
    for name, runs in rows:
        r = runs[len(runs) // 2]
        print(
            f"{name:9s} wall {r['wall'] * 1000:8.1f} ms  model {r['model'] * 1000:6.1f} ms  "
            f"tools {r['tools'] * 1000:7.1f} ms"
        )
    print(
        f"overhead per turn: native {native:.2f} ms, baseline {base:.2f} ms "
        f"(ratio {native / base:.1f}x; native minus baseline {native - base:.2f} ms)"
    )
    print(
        f"vs the peer: native {native:.2f} ms, mini-swe-agent DefaultAgent + LocalEnvironment "
        f"{peer:.2f} ms per turn (ratio {native / peer:.2f}x; the peer has no durable log, "
        "gateway, metering or sandbox)"
    )
    print(
        f"target <= 20 ms per turn: {'MET' if native <= 20 else 'MISSED'} (gateway on its unix "
        f"socket); over loopback TCP {tcp:.2f} ms per turn"
    )
    mid = sorted(natives, key=overhead_ms)[len(natives) // 2]
    print("where a native turn's time goes (ms per turn, median run):")
    for key, value in mid.items():
        if key.startswith("part:"):
            print(f"  {key[5:]:28s} {value / mid['turns'] * 1000:6.2f}")
    print(f"  {'(inside: scripted model)':28s} {mid['model'] / mid['turns'] * 1000:6.2f}")
    print(f"  {'(inside: commands ran)':28s} {mid['tools'] / mid['turns'] * 1000:6.2f}")
    for name, runs in (("unix socket", natives), ("loopback TCP", tcps)):
        httpx_ms = statistics.median(r["httpx_call"] for r in runs) * 1000
        sdk_ms = statistics.median(r["sdk_call"] for r in runs) * 1000
        print(
            f"one chat call through the gateway ({name}): httpx client {httpx_ms:.2f} ms, "
            f"openai SDK {sdk_ms:.2f} ms (ratio {sdk_ms / httpx_ms:.2f}x)"
        )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
