"""Redaction benchmark: the cost of redacting a 1 MB tool output with the vault's secrets.

    uv run python benchmarks/redact_bench.py [--mib 1] [--secrets 4] [--rounds 5]

Texts: random alphanumerics with spaces (worst case: nearly every position starts a walk into
a block of the forms), a CI-like log, and the log with token fragments echoed throughout. Reports
the median CPU seconds per MiB (process time: steadier than wall time on a shared machine) and
the one-off build time of a set of secrets (cached after). The baseline is what redaction was
before it matched runs: one regex alternation of the whole forms, substituted.
"""

from __future__ import annotations

import argparse
import base64
import random
import re
import statistics
import string
import time
from urllib.parse import quote

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


def _baseline(tokens: list[str]) -> re.Pattern[str]:
    """The former whole-form matcher: exact forms, then %-escaped and hex ones in any case."""
    exact: set[str] = set()
    folded: set[str] = set()
    for token in tokens:
        raw = token.encode()
        exact.add(token)
        for pad in range(3):
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                encoded = encode(b"\0" * pad + raw).decode()
                start = -(-8 * pad // 6)
                exact |= {encoded[start : 8 * (len(raw) + pad) // 6], encoded[start:]}
        folded |= {quote(token, safe=""), quote(token), "".join(f"%{b:02x}" for b in raw)}
        folded.add(raw.hex())
    parts = [(f, re.escape(f)) for f in exact] + [(f, f"(?i:{re.escape(f)})") for f in folded]
    parts.sort(key=lambda item: len(item[0]), reverse=True)
    return re.compile("|".join(p for _, p in parts))


def _cpu(fn: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()  # type: ignore[operator]
        times.append(time.process_time() - t0)
    return statistics.median(times)


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
    baseline = _baseline(tokens)
    for name, text in _texts(size, tokens).items():
        ours = _cpu(lambda text=text: redactor.text(text), args.rounds) / args.mib
        before = _cpu(lambda text=text: baseline.sub("[REDACTED]", text), args.rounds) / args.mib
        markers = redactor.text(text).count(redact.REDACTED)
        print(
            f"{name:>14}: {ours:.3f} s/MiB CPU (whole-form baseline {before:.3f}), "
            f"{markers} markers"
        )


if __name__ == "__main__":
    main()
