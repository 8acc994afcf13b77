"""Added latency of the SynthOrg gateway vs the LiteLLM proxy in front of the same upstream.

Three processes are measured against one fast local OpenAI-compatible upstream (the scripted
server, echo script): the upstream called directly, through ``synthorg gateway serve`` (bearer
verified, admission, metering into a real SQLite ledger, JSON access log), and through the
LiteLLM proxy (its own venv, created here when missing). Load comes from a separate process
using raw keep-alive HTTP/1.1 connections, so the client adds as little as possible.

    uv run python benchmarks/gateway_bench.py [--quick] [--no-litellm]
"""

from __future__ import annotations

import argparse
import asyncio
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

from support import free_port, wait_port

LITELLM_VENV = Path(os.environ.get("LITELLM_BENCH_VENV", "/tmp/litellm-bench"))
MODEL = "bench-model"
LITELLM_KEY = "sk-bench-master-0123456789abcdef"  # it refuses to start without a master key
CONCURRENCY = (1, 16, 64)
CPU: dict[str, list[float]] = {}
"""Per target: CPU seconds its proxy process spent per request, per measured batch."""
PIDS: dict[str, int] = {}
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "ping " * 20}], "max_tokens": 64}


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
    port: int, path: str, token: str | None, concurrency: int, total: int
) -> list[float]:
    body = json.dumps(BODY).encode()
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
    port, path, token, concurrency, total = args
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    result = runner(_load(int(port), path, token or None, int(concurrency), int(total)))
    print(json.dumps(result))


def measure(port: int, path: str, token: str | None, concurrency: int, total: int) -> list[float]:
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per level")
    opts = parser.parse_args()
    scale = 0.25 if opts.quick else 1.0
    work = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    up_port, gw_port, ll_port = free_port(), free_port(), free_port()
    env = {**os.environ, "SYNTHORG_HOME": str(work / "home")}
    config = work / "synthorg.toml"
    config.write_text(f"""
home = "{work / "home"}"
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
    mint = subprocess.run(
        [
            sys.executable,
            "-c",
            "from synthorg.cli.gateway import app; app()",
            "mint",
            "--model",
            MODEL,
            "--ceiling",
            "1000000",
            "--config",
            str(config),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    token = mint.stdout.strip()
    targets: dict[str, tuple[int, str, str | None]] = {
        "direct": (up_port, "/v1/chat/completions", None),
        "synthorg": (gw_port, "/v1/chat/completions", token),
    }
    litellm_note = ""
    litellm = None if opts.no_litellm else ensure_litellm()
    if litellm is None and not opts.no_litellm:
        litellm_note = "LiteLLM proxy could not be installed (uv missing or install failed)"

    with process(
        [
            sys.executable,
            "-m",
            "synthorg.gateway.scripted_server",
            "--port",
            str(up_port),
            "--script",
            "echo",
        ],
        up_port,
    ):
        gw_log = work / "gateway.log"
        with process(
            [
                sys.executable,
                "-c",
                "from synthorg.cli.gateway import app; app()",
                "serve",
                "--config",
                str(config),
                "--port",
                str(gw_port),
            ],
            gw_port,
            env=env,
            log=gw_log,
        ) as gw_proc:
            PIDS["synthorg"] = gw_proc.pid
            ll_ctx = None
            if litellm is not None:
                ll_config = work / "litellm.yaml"
                ll_config.write_text(
                    "model_list:\n"
                    f"  - model_name: {MODEL}\n"
                    "    litellm_params:\n"
                    f"      model: openai/{MODEL}\n"
                    f"      api_base: http://127.0.0.1:{up_port}/v1\n"
                    "      api_key: sk-bench\n"
                    "litellm_settings:\n  telemetry: false\n  drop_params: true\n"
                )
                ll_env = {
                    **os.environ,
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "LITELLM_LOG": "ERROR",
                    "LITELLM_MASTER_KEY": LITELLM_KEY,
                }
                ll_ctx = process(
                    [
                        str(litellm),
                        "--config",
                        str(ll_config),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(ll_port),
                        "--num_workers",
                        "1",
                    ],
                    ll_port,
                    env=ll_env,
                    log=work / "litellm.log",
                )
            try:
                if ll_ctx is not None:
                    PIDS["litellm"] = ll_ctx.__enter__().pid
                    targets["litellm"] = (ll_port, "/v1/chat/completions", LITELLM_KEY)
            except RuntimeError as exc:
                litellm_note = f"LiteLLM proxy failed to start: {exc} (log: {work}/litellm.log)"
                ll_ctx = None
            try:
                results = run_levels(targets, scale, opts.rounds)
            finally:
                if ll_ctx is not None:
                    ll_ctx.__exit__(None, None, None)
    report(results, litellm_note)
    if not litellm_note:
        shutil.rmtree(work, ignore_errors=True)  # kept when LiteLLM failed: its log is there


def run_levels(
    targets: dict[str, tuple[int, str, str | None]], scale: float, rounds: int
) -> dict[int, dict[str, list[float]]]:
    totals = {1: 1500, 16: 3200, 64: 6400}
    results: dict[int, dict[str, list[float]]] = {}
    for concurrency in CONCURRENCY:
        results[concurrency] = {name: [] for name in targets}
        for _ in range(rounds):  # interleave so drift hits every target alike
            for name, (port, path, token) in targets.items():
                total = int(totals[concurrency] * scale / rounds)
                if name == "litellm":
                    total = max(concurrency * 4, total // 4)  # it is much slower
                before = cpu_seconds(PIDS[name]) if name in PIDS else 0.0
                samples = measure(port, path, token, concurrency, total)
                if name in PIDS:
                    CPU.setdefault(name, []).append(
                        (cpu_seconds(PIDS[name]) - before) / len(samples)
                    )
                results[concurrency][name] += samples
        print(f"c={concurrency} done", flush=True)
    return results


def report(results: dict[int, dict[str, list[float]]], litellm_note: str) -> None:
    print()
    print(
        "| concurrency | direct p50 / p99 (ms) | SynthOrg overhead p50 / p99 (ms) "
        "| LiteLLM overhead p50 / p99 (ms) | LiteLLM / SynthOrg (p50) |"
    )
    print("| --- | --- | --- | --- | --- |")
    ok = True
    for concurrency, by in results.items():
        d50, d99 = pct(by["direct"], 0.5) * 1e3, pct(by["direct"], 0.99) * 1e3
        s50 = pct(by["synthorg"], 0.5) * 1e3 - d50
        s99 = pct(by["synthorg"], 0.99) * 1e3 - d99
        row = f"| {concurrency} | {d50:.3f} / {d99:.3f} | {s50:.3f} / {s99:.3f} | "
        if "litellm" in by:
            l50 = pct(by["litellm"], 0.5) * 1e3 - d50
            l99 = pct(by["litellm"], 0.99) * 1e3 - d99
            ratio = l50 / s50 if s50 > 0 else float("inf")
            row += f"{l50:.3f} / {l99:.3f} | {ratio:.1f}x |"
            ok &= ratio >= 5
        else:
            row += "n/a | n/a |"
        if concurrency == 1:
            ok &= s50 <= 1.0
        print(row)
        n = {k: len(v) for k, v in by.items()}
        print(
            f"  samples: {n}; mean ms: "
            + ", ".join(f"{k}={statistics.fmean(v) * 1e3:.3f}" for k, v in by.items()),
            file=sys.stderr,
        )
    if CPU:
        cpu = {k: statistics.fmean(v) * 1e3 for k, v in CPU.items()}
        line = ", ".join(f"{k} {v:.3f} ms" for k, v in cpu.items())
        print(f"\nproxy CPU per request (load-insensitive): {line}", end="")
        if "litellm" in cpu and cpu.get("synthorg"):
            print(f" -> LiteLLM / SynthOrg = {cpu['litellm'] / cpu['synthorg']:.1f}x")
        else:
            print()
    if litellm_note:
        print(f"\nNOTE: {litellm_note}")
    print(
        f"\ntargets (p50 overhead <= 1 ms at c=1, >= 5x lower than LiteLLM): "
        f"{'MET' if ok and not litellm_note else 'NOT MET'}"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        load_main(sys.argv[2:])
    else:
        main()
