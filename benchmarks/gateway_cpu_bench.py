"""CPU per request of ``synthorg gateway serve``, by thread, this tree vs earlier revisions.

Each gateway (this tree's, and each ``--before`` revision's ``src`` exported by ``git archive``,
each with its own home, SQLite ledger and bearer) serves the same scripted echo upstream;
sequential requests (c=1) come from gateway_bench's raw keep-alive load generator, in rounds
interleaved between the gateways so the machine's drift hits each alike. The CPU is read from
``/proc/PID/task/*/stat`` before and after each batch: the event loop's thread apart from the
others (the SQLite writer, its sync thread, executor threads). CPU time per request depends far
less on the machine's load than latency does; the clock is in ticks (10 ms), so use batches of
hundreds of requests.

    uv run python benchmarks/gateway_cpu_bench.py [--before REV ...] [--mode json|stream]
        [--concurrency N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import gateway_bench as gb

from support import baseline_src, free_port, wait_port

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, float]:
    """User+system CPU seconds of each thread of ``pid``."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (int(fields[11]) + int(fields[12])) * TICK_S
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", nargs="*", default=[gb.BEFORE], help="revisions to compare")
    parser.add_argument("--mode", choices=gb.MODES, default="json")
    parser.add_argument("--requests", type=int, default=500, help="requests per batch")
    parser.add_argument("--rounds", type=int, default=8, help="batches per gateway")
    parser.add_argument("--concurrency", type=int, default=1, help="requests at once")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gw-cpu-"))
    up_port = free_port()
    sources: dict[str, Path | None] = {"this tree": None}
    sources.update({rev: baseline_src(rev) for rev in opts.before})
    procs: list[subprocess.Popen[bytes]] = []
    upstream = [sys.executable, "-m", "synthorg.gateway.scripted_server"]
    up = subprocess.Popen(
        [*upstream, "--port", str(up_port), "--script", "echo"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    procs.append(up)
    try:
        wait_port(up_port, up)
        gateways: dict[str, tuple[int, int, str]] = {}
        for n, (name, src) in enumerate(sources.items()):
            home = work / f"home{n}"
            config = gb._config(work, home, up_port)
            env = {**os.environ, "SYNTHORG_HOME": str(home)}
            if src is not None:
                env["PYTHONPATH"] = str(src)
            token = gb._mint(config, env)
            port = free_port()
            with open(work / f"gateway{n}.log", "wb") as log:
                proc = subprocess.Popen(
                    gb._gateway(config, port), env=env, stdout=subprocess.DEVNULL, stderr=log
                )
            procs.append(proc)
            wait_port(port, proc)
            gb.measure(port, "/v1/chat/completions", token, 1, 200, opts.mode)  # warm
            gateways[name] = (proc.pid, port, token)
        loop_s = dict.fromkeys(gateways, 0.0)
        other_s = dict.fromkeys(gateways, 0.0)
        for _ in range(opts.rounds):
            for name, (pid, port, token) in gateways.items():
                before = thread_cpu(pid)
                gb.measure(
                    port, "/v1/chat/completions", token, opts.concurrency, opts.requests, opts.mode
                )
                for tid, cpu in thread_cpu(pid).items():
                    spent = cpu - before.get(tid, 0.0)
                    if tid == pid:
                        loop_s[name] += spent
                    else:
                        other_s[name] += spent
        served = opts.requests * opts.rounds
        print(
            f"gateway CPU per request, {opts.mode}, c={opts.concurrency}, "
            f"{opts.rounds} x {opts.requests}:"
        )
        print("| gateway | total (ms) | event loop's thread | other threads |")
        print("| --- | --- | --- | --- |")
        for name in gateways:
            loop, other = loop_s[name] / served * 1e3, other_s[name] / served * 1e3
            print(f"| {name} | {loop + other:.3f} | {loop:.3f} | {other:.3f} |")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


if __name__ == "__main__":
    main()
