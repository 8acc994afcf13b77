"""Per-turn overhead of the OpenHands adapter + bwrap sandbox vs the same SDK run in-process.

Run: uv run python benchmarks/openhands_loop_bench.py [--turns 10] [--reps 3]

Both sides run the same SDK conversation (run_task.py's own ``build_conversation``: same LLM,
agent, tools, terminal backend, prices) against the same gateway with the same scripted model
(``openhands_progress_script``: one terminal command per turn, then finish).

- adapter: ``synthorg``'s real service runs the conversation with the ``openhands`` loop: run
  spec, sandbox, entrypoint, JSON event stream, domain events made durable in the store,
  checkers at every event, turn records.
- direct: a small driver in the runtime venv builds the same conversation in-process (no
  sandbox, no adapter, no store) and stamps each SDK event as its callback sees it.

Per turn = time between the first and the last action / (actions - 1), taken where each side
records its events (the adapter: the store's append timestamps). Runs alternate so load
affects both alike. Target: adapter per turn <= 1.25x direct. Start-up (sandbox + SDK import)
is reported separately.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from synthorg.domain import Task, new_id
from synthorg.gateway.signer import RunBinding
from synthorg.runtime import OpenHandsRuntime, build_runtime, find_runtime
from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from synthorg.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: `tests` imports
from tests.support import scripted_settings

TARGET = 1.25
MODEL = "scripted-oh-bench"
SCRIPTS = "synthorg.engine.openhands.scripts"

DRIVER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from run_task import RunSpec, build_conversation, prepare_environment
spec = RunSpec.model_validate_json(sys.stdin.readline())
prepare_environment(spec)
stamps = []
def on_event(event):
    kind = type(event).__name__
    if kind == "ActionEvent":
        stamps.append(["action", time.time()])
conversation = build_conversation(spec, on_event)
conversation.send_message(spec.task_prompt)
conversation.run()
stamps.append(["finished", time.time()])
print(json.dumps({"stamps": stamps, "status": conversation.state.execution_status.value}))
sys.stdout.flush()
"""


def _runtime(home: Path | None) -> OpenHandsRuntime:
    """The built runtime: in ``home`` if given, else the test cache or SYNTHORG_HOME."""
    candidates = [home] if home else [Path.home() / ".cache" / "synthorg-tests" / "home", None]
    for candidate in candidates:
        found = find_runtime(candidate)
        if found is not None:
            return found
    print("building the OpenHands runtime (once)...")
    return build_runtime(home, print)


def _settings(home: Path) -> Settings:
    # The same settings the service tests boot with (one test-support module, no copy).
    return scripted_settings(home, f"{__name__}:bench_script", model=MODEL)


TURNS = 10


def bench_script() -> Any:
    """The gateway's script (a fresh one per provider): TURNS commands, then finish."""
    from synthorg.engine.openhands.scripts import openhands_progress_script

    return openhands_progress_script(TURNS)


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "README.md").write_text("bench\n")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=path, check=True)
    subprocess.run([*git, "add", "."], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=path, check=True)
    return path


def _per_turn(stamps: list[float]) -> float:
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


async def adapter_run(c: Components, tmp: Path, n: int) -> dict[str, float]:
    repo = _repo(tmp / f"adapter-{n}")
    task = Task(
        id=new_id("task"), project_id="bench", prompt="Write progress.txt", repository=str(repo)
    )
    record = await c.service.create(task, RunOptions(loop="openhands", max_turns=TURNS + 5))
    started = datetime.now(UTC)
    result = await c.service.run(record.id)
    assert result.termination_reason.value == "completed", result.error
    history = await c.store.history(record.id, limit=10_000)
    actions = [s.timestamp.timestamp() for s in history if s.event.kind == "action"]
    finished = next(s.timestamp for s in history if s.event.kind == "finished")
    return {
        "per_turn": _per_turn(actions),
        "startup": actions[0] - started.timestamp(),
        "total": (finished - started).total_seconds(),
    }


async def direct_run(
    c: Components, runtime: OpenHandsRuntime, tmp: Path, n: int
) -> dict[str, float]:
    workspace = _repo(tmp / f"direct-{n}")
    binding = RunBinding(
        execution_id=new_id("exec"),
        agent_id="bench",
        task_id="bench",
        project_id="bench",
        conversation_id=f"direct-{n}",
        provider="scripted",
        model_id=MODEL,
    )
    await c.gateway.open_execution(binding)
    assert c.gateway_endpoints.tcp_base_url is not None
    spec = {
        "task_prompt": "Write progress.txt",
        "model": MODEL,
        "gateway_base_url": c.gateway_endpoints.tcp_base_url,
        "gateway_token": c.gateway.mint(binding),
        "workspace_path": str(workspace),
        "persistence_dir": str(tmp / f"direct-state-{n}"),
        "conversation_id": binding.conversation_id,
        "max_turns": TURNS + 5,
        "project_id": "bench",
        "terminal_type": "subprocess",
        "input_cost_per_token": 3e-6,
        "output_cost_per_token": 15e-6,
    }
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    started = time.time()
    proc = await asyncio.create_subprocess_exec(
        str(runtime.python),
        str(driver),
        str(runtime.entrypoint.parent),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=workspace,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    out, _ = await proc.communicate((json.dumps(spec) + "\n").encode())
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["status"] == "finished", report
    actions = [t for kind, t in report["stamps"] if kind == "action"]
    finished = next(t for kind, t in report["stamps"] if kind == "finished")
    return {
        "per_turn": _per_turn(actions),
        "startup": actions[0] - started,
        "total": finished - started,
    }


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


async def main(turns: int, reps: int, runtime_home: Path | None) -> None:
    global TURNS
    TURNS = turns
    runtime = _runtime(runtime_home)
    with tempfile.TemporaryDirectory(prefix="oh-bench-") as raw:
        tmp = Path(raw)
        home = tmp / "home"
        home.mkdir()
        (home / "runtimes").symlink_to(runtime.venv_path.parents[1])
        settings = _settings(home)
        adapter: list[dict[str, float]] = []
        direct: list[dict[str, float]] = []
        async with boot(
            settings, registry=default_registry(), provisioner=default_provisioner
        ) as c:
            for n in range(reps):
                direct.append(await direct_run(c, runtime, tmp, n))
                adapter.append(await adapter_run(c, tmp, n))
                print(f"rep {n + 1}/{reps}: adapter {adapter[-1]}  direct {direct[-1]}")
    a_turn, d_turn = _median(adapter, "per_turn"), _median(direct, "per_turn")
    ratio = a_turn / d_turn
    print(f"\nOpenHands loop, {turns} terminal turns + finish, {reps} runs each (medians)")
    print(f"{'':10} {'per turn':>10} {'start-up':>10} {'total':>10}")
    for name, runs in (("direct", direct), ("adapter", adapter)):
        print(
            f"{name:10} {_median(runs, 'per_turn') * 1000:8.1f}ms "
            f"{_median(runs, 'startup'):9.2f}s {_median(runs, 'total'):9.2f}s"
        )
    print(f"load average (1/5/15 min): {os.getloadavg()}")
    verdict = "OK" if ratio <= TARGET else "OVER TARGET"
    print(f"per-turn ratio adapter/direct: {ratio:.3f}x (target <= {TARGET}x) {verdict}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="terminal turns per run")
    parser.add_argument("--reps", type=int, default=3, help="runs per side")
    parser.add_argument(
        "--runtime-home", type=Path, default=None, help="where the runtime is built"
    )
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.reps, args.runtime_home))
