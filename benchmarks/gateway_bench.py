"""Added latency of the SynthOrg gateway vs its previous revision and the LiteLLM proxy.

Four targets in front of one fast local OpenAI-compatible upstream (the scripted server, echo
script), non-streamed and streamed, at c=1/16/64, rounds interleaved: the upstream called
directly, ``synthorg gateway serve`` of this tree (bearer verified, admission, metering into a
real SQLite ledger, JSON access log), the floor under it (``gateway_floor.py``: the same
serving stack and upstream client forwarding bytes, nothing governed; the gateway minus the
floor is what governing a request costs), the same command of an earlier revision (``--before``,
default b287732; its ``src`` exported by ``git archive``, its own home and ledger), and the
LiteLLM proxy (its own venv, created here when missing). Load comes from a separate process
using raw keep-alive HTTP/1.1 connections, so the client adds as little as possible.

    uv run python benchmarks/gateway_bench.py [--quick] [--no-litellm] [--no-before] [--before REV]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support import baseline_src, free_port, wait_port

LITELLM_VENV = Path(os.environ.get("LITELLM_BENCH_VENV", "/tmp/litellm-bench"))
MODEL = "bench-model"
LITELLM_KEY = "sk-bench-master-0123456789abcdef"  # it refuses to start without a master key
CONCURRENCY = (1, 16, 64)
CPU: dict[str, list[float]] = {}
"""Per target: CPU seconds its proxy process spent per request, per measured batch."""
PIDS: dict[str, int] = {}
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "ping " * 20}], "max_tokens": 64}
MODES = ("json", "stream")
BEFORE = "b287732"
"""The revision compared with by default: main before the hot-path work of issue 30."""
TARGET_P50_MS, TARGET_P99_MS, TARGET_RATIO = 0.5, 1.0, 30.0
"""Added latency at c=1 (p50, p99) and how many times lower than LiteLLM's at every level."""


@contextmanager
def process(
    args: list[str], port: int, env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_port(port, proc)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def ensure_litellm() -> Path | None:
    """The litellm executable of the benchmark's own venv, installing it when missing."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists():
        return exe
    uv = shutil.which("uv")
    if uv is None:
        return None
    print(f"installing litellm[proxy] into {LITELLM_VENV} ...", flush=True)
    subprocess.run([uv, "venv", "-q", "--python", "3.12", str(LITELLM_VENV)], check=True)
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(LITELLM_VENV / "bin" / "python"),
            "litellm[proxy]",
        ],
        check=True,
    )
    return exe if exe.exists() else None


# -- load generator (runs in its own process) ----------------------------------------------


async def _one_connection(port: int, request: bytes, count: int, out: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = None
            chunked = False
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                elif name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
            status = head.split(b" ", 2)[1]
            if chunked:
                while True:
                    size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                    await reader.readexactly(size + 2)
                    if size == 0:
                        break
            elif length is not None:
                await reader.readexactly(length)
            if status != b"200":
                raise RuntimeError(f"status {status!r}")
            out.append(time.perf_counter() - start)
    finally:
        writer.close()


async def _load(
    port: int, path: str, token: str | None, concurrency: int, total: int, mode: str
) -> list[float]:
    body = json.dumps({**BODY, "stream": mode == "stream"}).encode()
    headers = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if token:
        headers.append(f"Authorization: Bearer {token}")
    request = ("\r\n".join(headers) + "\r\n\r\n").encode() + body
    per = max(1, total // concurrency)
    warm: list[float] = []
    await asyncio.gather(*(_one_connection(port, request, 5, warm) for _ in range(concurrency)))
    latencies: list[float] = []
    await asyncio.gather(
        *(_one_connection(port, request, per, latencies) for _ in range(concurrency))
    )
    return latencies


def load_main(args: list[str]) -> None:
    port, path, token, concurrency, total, mode = args
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    result = runner(_load(int(port), path, token or None, int(concurrency), int(total), mode))
    print(json.dumps(result))


def measure(
    port: int, path: str, token: str | None, concurrency: int, total: int, mode: str
) -> list[float]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--load",
            str(port),
            path,
            token or "",
            str(concurrency),
            str(total),
            mode,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return [float(x) for x in json.loads(out.stdout)]


def cpu_seconds(pid: int) -> float:
    """User+system CPU of a process and its children (psutil, from the dev group)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the run -------------------------------------------------------------------------------


def _config(work: Path, home: Path, up_port: int) -> Path:
    config = work / f"{home.name}.toml"
    config.write_text(f"""
home = "{home}"
[gateway]
[[gateway.providers]]
name = "local"
kind = "openai"
base_url = "http://127.0.0.1:{up_port}/v1"
models = ["{MODEL}"]
[gateway.prices.{MODEL}]
input_per_mtok_usd = 3
output_per_mtok_usd = 15
""")
    return config


def _mint(config: Path, env: dict[str, str]) -> str:
    args = ["mint", "--model", MODEL, "--ceiling", "1000000", "--config", str(config)]
    mint = subprocess.run(
        [sys.executable, "-c", "from synthorg.cli.gateway import app; app()", *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return mint.stdout.strip()


def _gateway(config: Path, port: int) -> list[str]:
    serve = ["serve", "--config", str(config), "--port", str(port)]
    return [sys.executable, "-c", "from synthorg.cli.gateway import app; app()", *serve]


def _litellm(exe: Path, work: Path, up_port: int, port: int) -> Any:
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: http://127.0.0.1:{up_port}/v1\n"
        "      api_key: sk-bench\n"
        "litellm_settings:\n  telemetry: false\n  drop_params: true\n"
    )
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MASTER_KEY": LITELLM_KEY,
    }
    args = [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    return process([*args, "--num_workers", "1"], port, env=env, log=work / "litellm.log")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--before", default=BEFORE, help="the revision to compare with")
    parser.add_argument("--no-before", action="store_true", help="skip the earlier revision")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per level")
    parser.add_argument(
        "--levels", type=int, nargs="+", default=list(CONCURRENCY), help="concurrency levels"
    )
    opts = parser.parse_args()
    scale = 0.25 if opts.quick else 1.0
    work = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    up_port, gw_port, before_port, ll_port = free_port(), free_port(), free_port(), free_port()
    floor_port = free_port()
    homes = {"synthorg": work / "home", "before": work / "home-before"}
    configs = {name: _config(work, home, up_port) for name, home in homes.items()}
    envs = {name: {**os.environ, "SYNTHORG_HOME": str(home)} for name, home in homes.items()}
    gateways = ("synthorg", *(() if opts.no_before else ("before",)))
    if not opts.no_before:
        envs["before"]["PYTHONPATH"] = str(baseline_src(opts.before))
    # A bearer names the ledger that opened its run: each gateway mints its own.
    tokens = {name: _mint(configs[name], envs[name]) for name in gateways}
    targets: dict[str, tuple[int, str, str | None]] = {
        "direct": (up_port, "/v1/chat/completions", None),
    }
    ports = {"synthorg": gw_port, "before": before_port}
    notes: list[str] = []
    litellm = None if opts.no_litellm else ensure_litellm()
    if litellm is None and not opts.no_litellm:
        notes.append("LiteLLM proxy could not be installed (uv missing or install failed)")
    upstream = [sys.executable, "-m", "synthorg.gateway.scripted_server"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            process([*upstream, "--port", str(up_port), "--script", "echo"], up_port)
        )
        floor = [sys.executable, str(Path(__file__).with_name("gateway_floor.py"))]
        upstream_url = f"http://127.0.0.1:{up_port}/v1"
        floor_args = [*floor, "--port", str(floor_port), "--upstream", upstream_url]
        PIDS["floor"] = stack.enter_context(process(floor_args, floor_port)).pid
        targets["floor"] = (floor_port, "/v1/chat/completions", None)
        for name in gateways:
            args = _gateway(configs[name], ports[name])
            proc = stack.enter_context(
                process(args, ports[name], env=envs[name], log=work / f"{name}.log")
            )
            PIDS[name] = proc.pid
            targets[name] = (ports[name], "/v1/chat/completions", tokens[name])
        if litellm is not None:
            try:
                PIDS["litellm"] = stack.enter_context(_litellm(litellm, work, up_port, ll_port)).pid
                targets["litellm"] = (ll_port, "/v1/chat/completions", LITELLM_KEY)
            except RuntimeError as exc:
                notes.append(f"LiteLLM proxy failed to start: {exc} (log: {work}/litellm.log)")
        results = {
            mode: run_levels(targets, scale, opts.rounds, mode, opts.levels) for mode in MODES
        }
    met = all([report(mode, by_level) for mode, by_level in results.items()])  # every table
    report_cpu()
    for note in notes:
        print(f"\nNOTE: {note}")
    print(
        f"\ntargets (c=1: +p50 <= {TARGET_P50_MS} ms, +p99 <= {TARGET_P99_MS} ms; "
        f">= {TARGET_RATIO:g}x lower than LiteLLM at every level): "
        f"{'MET' if met and not notes else 'NOT MET'}"
    )
    if not notes:
        shutil.rmtree(work, ignore_errors=True)  # kept when LiteLLM failed: its log is there


def run_levels(
    targets: dict[str, tuple[int, str, str | None]],
    scale: float,
    rounds: int,
    mode: str,
    levels: list[int],
) -> dict[int, dict[str, list[float]]]:
    totals = {1: 1500, 16: 3200, 64: 6400}
    results: dict[int, dict[str, list[float]]] = {}
    for concurrency in levels:
        results[concurrency] = {name: [] for name in targets}
        for _ in range(rounds):  # interleave so drift hits every target alike
            for name, (port, path, token) in targets.items():
                total = int(totals[concurrency] * scale / rounds)
                if name == "litellm":
                    total = max(concurrency * 4, total // 4)  # it is much slower
                before = cpu_seconds(PIDS[name]) if name in PIDS else 0.0
                samples = measure(port, path, token, concurrency, total, mode)
                if name in PIDS:
                    CPU.setdefault(f"{name} {mode}", []).append(
                        (cpu_seconds(PIDS[name]) - before) / len(samples)
                    )
                results[concurrency][name] += samples
        print(f"{mode} c={concurrency} done", flush=True)
    return results


def report(mode: str, results: dict[int, dict[str, list[float]]]) -> bool:
    """Print one mode's table; whether its targets are met."""
    shown = ("synthorg", "before", "floor", "litellm")
    names = [n for n in shown if n in next(iter(results.values()))]
    print(f"\n{mode}: added latency over the direct upstream, p50 / p99 (ms)")
    print("| c | direct p50 / p99 | " + " | ".join(names) + " | LiteLLM / SynthOrg (p50) |")
    print("| --- " * (len(names) + 3) + "|")
    ok = True
    for concurrency, by in results.items():
        d50, d99 = pct(by["direct"], 0.5) * 1e3, pct(by["direct"], 0.99) * 1e3
        added = {n: (pct(by[n], 0.5) * 1e3 - d50, pct(by[n], 0.99) * 1e3 - d99) for n in names}
        cells = " | ".join(f"{added[n][0]:+.3f} / {added[n][1]:+.3f}" for n in names)
        s50, s99 = added["synthorg"]
        ratio = "n/a"
        if "litellm" in added:
            value = added["litellm"][0] / s50 if s50 > 0 else float("inf")
            ratio = f"{value:.1f}x"
            ok &= value >= TARGET_RATIO
        if concurrency == 1:
            ok &= s50 <= TARGET_P50_MS and s99 <= TARGET_P99_MS
        print(f"| {concurrency} | {d50:.3f} / {d99:.3f} | {cells} | {ratio} |")
        n = {k: len(v) for k, v in by.items()}
        print(f"  samples: {n}", file=sys.stderr)
    return ok


def report_cpu() -> None:
    cpu = {k: statistics.fmean(v) * 1e3 for k, v in CPU.items()}
    line = ", ".join(f"{k} {v:.3f} ms" for k, v in cpu.items())
    print(f"\nproxy CPU per request (load-insensitive): {line}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        load_main(sys.argv[2:])
    else:
        main()
