"""Per-request cost of the gateway's upstream client vs the hand-written one it replaced.

One fast local upstream (the scripted server, echo script, its own process on uvloop) is called
sequentially over one keep-alive connection by each client in turn, in interleaved rounds so
machine drift hits each alike: the gateway's stack (``upstream_http``: httpcore on asyncio
streams), plain httpcore, httpx, aiohttp, and the hand-written HTTP/1.1 client of revision
e9d3eaf (``http1``, loaded from that revision's source). Reported: p50 / p99 latency and this
process's CPU per request, and the difference vs ``http1``, same run. aiohttp is a dev
dependency, for this benchmark only.

    uv run python benchmarks/gateway_client_bench.py [--requests 400] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpcore
import httpx
import yarl

from support import baseline_src, free_port, wait_port
from synthorg.gateway.upstream_http import UpstreamClient


def _old_pool() -> Any:
    """The hand-written ``Http1Pool`` of the baseline revision (it imports only errors)."""
    path = baseline_src() / "synthorg" / "gateway" / "http1.py"
    spec = importlib.util.spec_from_file_location("baseline_http1", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.Http1Pool


BODY = json.dumps(
    {"model": "bench-model", "messages": [{"role": "user", "content": "ping " * 20}]}
).encode()
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


Call = Callable[[], Awaitable[bytes]]


async def _clients(base: str) -> tuple[dict[str, Call], Callable[[], Awaitable[None]]]:
    pool = _old_pool()(base, headers=HEADERS, timeout_s=30)
    # Tuned as the gateway's provider tunes it: no cookie jar, the URL parsed once.
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
        headers=HEADERS,
        timeout=aiohttp.ClientTimeout(total=None, connect=30),
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    url = yarl.URL(base + "/chat/completions")
    client = httpx.AsyncClient(
        base_url=base,
        headers=HEADERS,
        timeout=30,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
    )

    core = httpcore.AsyncConnectionPool(max_connections=None, max_keepalive_connections=64)
    core_url = httpcore.URL(base + "/chat/completions")
    core_headers = [(k.encode(), v.encode()) for k, v in HEADERS.items()]
    core_headers.append((b"content-length", str(len(BODY)).encode()))

    async def with_httpcore() -> bytes:
        response = await core.request("POST", core_url, headers=core_headers, content=BODY)
        return response.content

    ours = UpstreamClient(base, headers=HEADERS)

    async def with_upstream_http() -> bytes:
        async with ours.post("/chat/completions", BODY) as answer:
            return await answer.read()

    async def hand_written() -> bytes:
        response = await pool.post("/chat/completions", BODY)
        return await response.read()

    async def with_aiohttp() -> bytes:
        response = await session.post(url, data=BODY)
        try:
            return await response.read()
        finally:
            response.release()

    async def with_httpx() -> bytes:
        return (await client.post("/chat/completions", content=BODY)).content

    async def close() -> None:
        await pool.aclose()
        await session.close()
        await client.aclose()
        await core.aclose()
        await ours.aclose()

    clients: dict[str, Call] = {
        "http1": hand_written,
        "aiohttp": with_aiohttp,
        "httpx": with_httpx,
        "httpcore": with_httpcore,
        "upstream_http": with_upstream_http,
    }
    return clients, close


CPU: dict[str, float] = {}
"""Per client: this process's CPU milliseconds per request (independent of machine load)."""


async def _measure(requests: int, rounds: int, base: str) -> dict[str, list[float]]:
    clients, close = await _clients(base)
    samples: dict[str, list[float]] = {name: [] for name in clients}
    cpu = dict.fromkeys(clients, 0.0)
    try:
        for call in clients.values():  # warm up: connect and fill caches
            for _ in range(50):
                await call()
        for _ in range(rounds):
            for name, call in clients.items():
                out = samples[name]
                cpu_started = time.process_time()
                for _ in range(requests):
                    started = time.perf_counter()
                    body = await call()
                    out.append((time.perf_counter() - started) * 1000)
                    assert body.startswith(b"{"), body[:80]
                cpu[name] += time.process_time() - cpu_started
    finally:
        await close()
    for name, seconds in cpu.items():
        CPU[name] = seconds * 1000 / (requests * rounds)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=400, help="per client per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "synthorg.gateway.scripted_server", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_port(port, upstream)
        import uvloop

        samples = uvloop.run(_measure(args.requests, args.rounds, f"http://127.0.0.1:{port}/v1"))
    finally:
        os.killpg(upstream.pid, signal.SIGTERM)
        upstream.wait(timeout=15)
    base = statistics.median(samples["http1"])
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} x {args.requests} per client")
    print(
        "| client | p50 (ms) | p99 (ms) | p50 vs http1 (ms) | ratio (p50) "
        "| client CPU/request (ms) | CPU vs http1 (ms) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, values in samples.items():
        values.sort()
        p50 = statistics.median(values)
        p99 = values[int(len(values) * 0.99)]
        cpu, cpu_delta = CPU[name], CPU[name] - CPU["http1"]
        print(
            f"| {name} | {p50:.3f} | {p99:.3f} | {p50 - base:+.3f} | {p50 / base:.2f}x "
            f"| {cpu:.3f} | {cpu_delta:+.3f} |"
        )


if __name__ == "__main__":
    main()
