"""Redaction benchmark: the cost of redacting a 1 MB tool output with the vault's secrets.

    uv run python benchmarks/redact_bench.py [--mib 1] [--secrets 4] [--rounds 5]

Texts: random alphanumerics with spaces (worst case: nearly every position starts a walk into
the windows' trie), a CI-like log, and the log with token fragments echoed throughout. Reports
the median seconds per MiB and the one-off compile time of a set of secrets (cached after).
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import time

from synthorg.mcp import redact
from synthorg.mcp.redact import Redactor


def _texts(size: int, tokens: list[str]) -> dict[str, str]:
    rng = random.Random(7)
    alnum = string.ascii_letters + string.digits
    noise = "".join(rng.choice(alnum + "  \n") for _ in range(size))
    lines = [
        f"2026-12-02T06:{i % 60:02d}:00Z step {i}: ran tests/unit/test_{i % 97}.py ... ok"
        for i in range(size // 50)
    ]
    log = "\n".join(lines)[:size]
    step = max(1, len(lines) // 50)
    echoed = "\n".join(
        f"{line} token {tokens[i % len(tokens)][3:23]}" if i % step == 0 else line
        for i, line in enumerate(lines)
    )[:size]
    return {"random": noise, "ci-log": log, "ci-log+echoes": echoed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, default=1.0)
    parser.add_argument("--secrets", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(11)
    tokens = [
        "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))
        for _ in range(args.secrets)
    ]
    started = time.perf_counter()
    redactor = Redactor(tokens)
    compile_s = time.perf_counter() - started
    size = int(args.mib * (1 << 20))
    print(f"{args.secrets} secrets of 40 chars: compile {compile_s * 1000:.1f} ms (once per set)")
    for name, text in _texts(size, tokens).items():
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            out = redactor.text(text)
            times.append(time.perf_counter() - t0)
        per_mib = statistics.median(times) / args.mib
        print(f"{name:>14}: {per_mib:.3f} s/MiB median, {out.count(redact.REDACTED)} markers")


if __name__ == "__main__":
    main()
