"""Agent server side by side with OpenHands' agent-server: start-up time and idle memory.

    uv run python benchmarks/server_vs_agent_server_bench.py [--rounds 3]
        [--venv ~/.cache/synthorg-bench/agent-server]

The peer runs from its own venv, which this script makes once (never CI):
``uv venv`` + ``uv pip install openhands-agent-server==1.58.2 openhands-sdk==1.58.2
openhands-tools==1.58.2``. Each round starts ``synthorg serve`` and ``agent-server`` on
loopback, measures the time from spawn to the first 200 of ``/health``, waits 2 s and reads
the RSS of each process tree; both are then stopped. Figures are medians over the rounds and
the ratio is SynthOrg / peer. (The concurrent-conversations comparison of issue 15 needs an
OpenAI-compatible fake model the peer can call; it is not part of this script.)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from baseline import bytecode_env

from support import free_port

VERSION = "1.58.2"
PACKAGES = [f"openhands-agent-server=={VERSION}", f"openhands-sdk=={VERSION}"]
PACKAGES.append(f"openhands-tools=={VERSION}")


def ensure_peer(venv: Path) -> Path:
    """The agent-server executable, installing the peer's venv on first use."""
    exe = venv / "bin" / "agent-server"
    if exe.exists():
        return exe
    uv = shutil.which("uv") or sys.exit("uv is needed to install the peer's venv")
    # The interpreter this runs on (uv must not try to download one: no internet here).
    base = os.path.realpath(sys.executable)
    subprocess.run([uv, "venv", "-q", str(venv), "--python", base], check=True)
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *PACKAGES],
        check=True,
    )
    return exe


def tree_rss(pid: int) -> int:
    proc = psutil.Process(pid)
    procs = [proc, *proc.children(recursive=True)]
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def spawn_group(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``command`` in a process group of its own (``stop_group`` ends it), output discarded."""
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def measure(command: list[str], env: dict[str, str], port: int) -> tuple[float, int]:
    """(seconds to a healthy /health, RSS of the process tree 2 s later)."""
    started = time.perf_counter()
    proc = spawn_group(command, env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2) as client:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"{command[0]} exited with {proc.returncode}")
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.perf_counter() - started > 300:
                    raise SystemExit(f"{command[0]} never became healthy")
                time.sleep(0.05)
        ready = time.perf_counter() - started
        time.sleep(2)
        return ready, tree_rss(proc.pid)
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group of proc (started with start_new_session), SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def synthorg(scratch: Path) -> tuple[list[str], dict[str, str], int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env["SYNTHORG_HOME"] = str(scratch / "synthorg-home")
    command = [sys.executable, "-m", "synthorg.cli.app", "serve", "--port", str(port)]
    return command, env, port


def peer(exe: Path, scratch: Path) -> tuple[list[str], dict[str, str], int]:
    port = free_port()
    home = scratch / "oh-home"
    env = {
        **os.environ,
        "HOME": str(home),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OH_ENABLE_VSCODE": "false",
        "OH_ENABLE_BROWSER": "false",
        "OH_PRELOAD_TOOLS": "false",
        "OH_CONVERSATIONS_PATH": str(home / "conversations"),
        "OH_WORKSPACE_PATH": str(home / "workspace"),
        "OH_BASH_EVENTS_DIR": str(home / "bash_events"),
        "OH_CONVERSATION_WORKTREE_ROOT": str(home / "worktrees"),
    }
    # Its modules run from bytecode, as an installed package's do (this machine's shell sets
    # PYTHONDONTWRITEBYTECODE: without a cache every start compiled the SDK, ~37 CPU-s).
    env = bytecode_env(env, exe.parent.parent / "pycache")
    return [str(exe), "--host", "127.0.0.1", "--port", str(port)], env, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--venv", type=Path, default=Path.home() / ".cache" / "synthorg-bench" / "agent-server"
    )
    args = parser.parse_args()
    exe = ensure_peer(args.venv)
    results: dict[str, list[tuple[float, int]]] = {"synthorg": [], "agent-server": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="server-bench-") as raw:
            scratch = Path(raw)
            results["synthorg"].append(measure(*synthorg(scratch)))
            results["agent-server"].append(measure(*peer(exe, scratch)))
    median = {
        name: (
            statistics.median(r[0] for r in runs),
            statistics.median(r[1] for r in runs) / 2**20,
        )
        for name, runs in results.items()
    }
    for name, (ready, rss) in median.items():
        print(f"{name:13s} start-up to healthy {ready:6.2f} s   idle RSS {rss:7.1f} MiB")
    ours, theirs = median["synthorg"], median["agent-server"]
    print(
        f"ratio synthorg/agent-server: start-up {ours[0] / theirs[0]:.2f}x, "
        f"idle RSS {ours[1] / theirs[1]:.2f}x (rounds={args.rounds}, "
        f"load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
