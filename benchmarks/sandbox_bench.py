"""Start-to-first-line latency: bwrap sandbox vs a plain subprocess of the same program.

Run: uv run python benchmarks/sandbox_bench.py [--starts 200]

Both sides start the program through asyncio with stdin/stdout/stderr pipes, write the
first (run-spec) line, and stop the clock at the first stdout line. The two are interleaved
start by start so machine load affects both alike. Target: overhead <= 15 ms at p50.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from synthorg.sandbox import BwrapSandbox, ForwardedEndpoint, SandboxRequest
from synthorg.sandbox.bwrap import host_python
from synthorg.sandbox.process import STREAM_LIMIT

TARGET_MS = 15.0


async def plain_start(argv: list[str], cwd: Path) -> tuple[float, float]:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=STREAM_LIMIT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"{}\n")
    await proc.stdout.readline()
    first = time.perf_counter() - started
    await proc.communicate()
    return first, time.perf_counter() - started


async def sandbox_start(sandbox: BwrapSandbox, request: SandboxRequest) -> tuple[float, float]:
    started = time.perf_counter()
    async with sandbox.stream(request, "{}") as proc:
        async for _ in proc:
            first = time.perf_counter() - started
            break
        async for _ in proc:
            pass
    return first, time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def compare(
    label: str, sandbox: BwrapSandbox, request: SandboxRequest, ws: Path, starts: int
) -> float:
    plain: list[float] = []
    raw: list[float] = []
    boxed: list[float] = []
    boxed_total: list[float] = []
    args, argv = sandbox.build_args(request)
    raw_argv = [*args, "--", *argv]  # bwrap alone: same mounts, no cgroups, no handshake
    for _ in range(5):  # warm caches on both sides
        await plain_start(request.argv, ws)
        await sandbox_start(sandbox, request)
    for _ in range(starts):
        plain.append((await plain_start(request.argv, ws))[0])
        raw.append((await plain_start(raw_argv, ws))[0])
        first, total = await sandbox_start(sandbox, request)
        boxed.append(first)
        boxed_total.append(total)
    overhead = pct(boxed, 0.5) - pct(plain, 0.5)
    print(f"\n{label}  ({starts} starts each, interleaved)")
    print(f"  plain subprocess   p50 {pct(plain, 0.5):7.2f} ms   p99 {pct(plain, 0.99):7.2f} ms")
    print(f"  bwrap alone        p50 {pct(raw, 0.5):7.2f} ms   p99 {pct(raw, 0.99):7.2f} ms")
    print(f"  BwrapSandbox       p50 {pct(boxed, 0.5):7.2f} ms   p99 {pct(boxed, 0.99):7.2f} ms")
    print(
        f"  sandbox start+teardown p50 {pct(boxed_total, 0.5):7.2f} ms"
        f"   mean first line {statistics.mean(boxed) * 1000:.2f} ms"
    )
    print(
        f"  overhead p50 {overhead:+.2f} ms   ratio p50 {pct(boxed, 0.5) / pct(plain, 0.5):.2f}x"
        f"   target <= {TARGET_MS} ms: {'PASS' if overhead <= TARGET_MS else 'FAIL'}"
    )
    return overhead


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=200)
    args = parser.parse_args()
    sandbox = BwrapSandbox()
    print(
        f"cgroups: {sandbox.cgroups.detail}; "
        f"load average {os.getloadavg()} on {os.cpu_count()} cpus"
    )
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        echo = SandboxRequest(argv=["/bin/echo", "ready"], workspace=ws, conversation_id="bench")
        python = echo.model_copy(update={"argv": [host_python(), "-c", "print('ready')"]})
        overheads = [
            await compare("/bin/echo ready", sandbox, echo, ws, args.starts),
            await compare("python3 -c print()", sandbox, python, ws, args.starts),
        ]
        # With a forwarded endpoint the launcher (a stdlib Python process) runs first.
        sock_path = ws / "gw.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(sock_path))
        server.listen()
        endpoint = ForwardedEndpoint(name="gateway", host_socket=sock_path, sandbox_port=18080)
        forwarded = echo.model_copy(update={"endpoints": [endpoint]})
        await compare("/bin/echo + forwarder", sandbox, forwarded, ws, max(args.starts // 4, 20))
        server.close()
    print(f"\nload average at the end {os.getloadavg()}")
    return 0 if max(overheads) <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
