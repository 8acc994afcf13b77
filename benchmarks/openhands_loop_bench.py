"""OpenHands loop: cold start and per-turn overhead of the adapter + bwrap sandbox vs the SDK.

Run: uv run python benchmarks/openhands_loop_bench.py [--turns 3] [--reps 3] [--per-turn]
     [--without-bytecode] [--split-sandbox] [--pool]

Both sides run the same SDK conversation (run_task.py's own ``build_conversation``: same LLM,
agent, tools, terminal backend, prices) against the same gateway with the same scripted model
(``openhands_progress_script``: one terminal command per turn, then finish).

- adapter: ``synthorg``'s real service runs the conversation with the ``openhands`` loop: run
  spec, sandbox, entrypoint, JSON event stream, domain events made durable in the store,
  checkers at every event, turn records.
- direct: a small driver in the runtime venv builds the same conversation in-process (no
  sandbox, no adapter, no store) and stamps each SDK event as its callback sees it.
- cli: ``synthorg run --loop openhands`` spawned as a user would (its own process, gateway,
  store and sandbox), timed from the spawn to the first model request its gateway receives,
  with ``[openhands] pool_size = 0`` (no pre-started sandbox).
- with ``--pool``, also: cli-pool, the same command with the default pool (one sandbox started
  at boot, so its SDK import overlaps the rest of the start-up); and, as ``synthorg serve``
  runs them, the in-process service without a pool (serve-cold) and with its pool settled
  (serve-pool: the server has been idle since its last run, its pooled sandbox has imported
  the SDK), each timed from ``create`` to the first model request. It prints the idle pooled
  sandbox's memory (USS and PSS of its process tree).
- with ``--pool``, also run-serve: ``synthorg run --loop openhands`` handed to a running
  ``synthorg serve`` (a real subprocess, pool of one) over its local socket, timed from the
  spawn of ``synthorg run`` to the first model request the serve's gateway receives, each
  time after the serve's pooled sandbox has settled (imported the SDK, every thread asleep).

Cold start = spawn -> first model request at the gateway (``oh_first_request`` stamps each
request). The direct side is the SDK's own cold start: interpreter, ``import openhands.sdk``
and the tools, conversation set-up, first request; its driver stamps each phase. The cli side's
phases are read from /proc, polled every 5 ms: when ``bwrap`` for run_task.py appears (the
control plane's own start-up: import, boot, worktree, run spec) and when the runtime python has
been exec'd inside it (sandbox set-up); from there to the first request is the in-sandbox
interpreter + SDK import + conversation set-up (``--split-sandbox`` splits it: the run's
run_task.py is then oh_phase_entrypoint.py, the real entrypoint with phase stamps). The
gateway is served on unix sockets only; the direct driver reaches it through a loopback TCP
forwarder in this process (the sandbox reaches it through its own forwarder: one hop each).

Per turn (``--per-turn``, in-process adapter) = time between the first and the last action /
(actions - 1), taken where each side records its events (the adapter: the store's append
timestamps); target: adapter per turn <= 1.25x direct. Runs alternate so load affects all sides
alike. Every measured process reads compiled bytecode (one uncounted warm-up run per side).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from synthorg.domain import Task, new_id
from synthorg.domain.binding import RunBinding
from synthorg.runtime import OpenHandsRuntime, build_runtime, find_runtime
from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from synthorg.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: `tests` imports
from tests.support import scripted_settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # oh_first_request, for the gateways

TARGET = 1.25
MODEL = "scripted-oh-bench"
SCRIPTS = "synthorg.engine.openhands.scripts"

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "oh_first_request:stamped_progress"

DRIVER = r"""
import time
stamps = [["interpreter", time.time()]]
import json, sys
sys.path.insert(0, sys.argv[1])
from run_task import RunSpec, build_conversation, prepare_environment
spec = RunSpec.model_validate_json(sys.stdin.readline())
prepare_environment()  # the env the SDK reads at import, as run_task.py sets it
import openhands.sdk, openhands.tools.file_editor, openhands.tools.terminal
stamps.append(["sdk_imported", time.time()])
import_cpu = time.process_time()  # this process's CPU so far: the interpreter and the imports
def on_event(event):
    kind = type(event).__name__
    if kind == "ActionEvent":
        stamps.append(["action", time.time()])
conversation = build_conversation(spec, on_event)
conversation.send_message(spec.task_prompt)
stamps.append(["conversation_ready", time.time()])
conversation.run()
stamps.append(["finished", time.time()])
status = conversation.state.execution_status.value
print(json.dumps({"stamps": stamps, "import_cpu": import_cpu, "status": status}))
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
    return scripted_settings(home, SCRIPT, model=MODEL)


TURNS = 10


def _stamps(path: Path) -> list[float]:
    """The wall-clock times the gateway received each model request (oh_first_request)."""
    return [float(line) for line in path.read_text().split()] if path.exists() else []


def _forward_tcp(uds: Path) -> Any:
    """A loopback TCP listener piping each connection to the gateway's unix socket."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(uds))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return asyncio.start_server(handle, "127.0.0.1", 0)


class ProcWatch:
    """Polls /proc every 5 ms for the run's sandbox: when bwrap, then the runtime python, appear.

    Only descendants of ``root`` whose argv mentions run_task.py count (other runs on a shared
    machine start the same entrypoint). Resolution: one /proc scan (~20 ms at ~150 processes)
    plus the 5 ms pause.
    """

    def __init__(self, python: Path, root: int) -> None:
        self.python = str(python)
        self.root = root
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ProcWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _descends(self, pid: int) -> bool:
        while pid > 1:
            if pid == self.root:
                return True
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return False
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: ppid
        return False

    def _poll(self) -> None:
        while not self._stop.is_set() and len(self.seen) < 2:
            now = time.time()
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if not any(b"run_task.py" in arg for arg in argv):
                    continue
                if not self._descends(int(entry.name)):
                    continue
                first = argv[0].decode(errors="replace")
                if first.endswith("bwrap"):
                    self.seen.setdefault("sandbox_spawned", now)
                elif first == self.python or first.endswith("/python"):
                    self.seen.setdefault("interpreter", now)
            self._stop.wait(0.005)


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
    c: Components,
    tcp_base_url: str,
    runtime: OpenHandsRuntime,
    tmp: Path,
    n: int | str,
    *,
    bytecode: bool = True,
) -> dict[str, float]:
    """The SDK in-process; ``bytecode=False`` ignores the venv's compiled bytecode."""
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
    bearer = await c.gateway.issue(binding)
    stamp_file = tmp / f"direct-stamps-{n}"
    os.environ["OH_BENCH_STAMPS"] = str(stamp_file)  # read by the in-process gateway's script
    spec = {
        "task_prompt": "Write progress.txt",
        "model": MODEL,
        "gateway_base_url": tcp_base_url,
        "gateway_token": bearer,
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
        env={
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            # An empty cache prefix never written: every module compiled from source, as if
            # the runtime build had not compiled the venv (it does: uv --compile-bytecode).
            **({} if bytecode else no_bytecode(tmp / f"no-pyc-{n}")),
        },
    )
    out, _ = await proc.communicate((json.dumps(spec) + "\n").encode())
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["status"] == "finished", report
    stamps = dict((kind, t) for kind, t in reversed(report["stamps"]))  # first of each kind
    actions = [t for kind, t in report["stamps"] if kind == "action"]
    first_request = _stamps(stamp_file)[0]
    return {
        "cold_start": first_request - started,
        "interpreter": stamps["interpreter"] - started,
        "sdk_import": stamps["sdk_imported"] - stamps["interpreter"],
        "import_cpu": report["import_cpu"],
        "conversation": stamps["conversation_ready"] - stamps["sdk_imported"],
        "to_request": first_request - stamps["conversation_ready"],
        "per_turn": _per_turn(actions),
        "total": stamps["finished"] - started,
    }


def no_bytecode(prefix: Path) -> dict[str, str]:
    return {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(prefix)}


def phase_files(tmp: Path) -> Path:
    """Runtime files whose run_task.py stamps its phases (oh_phase_entrypoint), lock unchanged."""
    from synthorg.runtime.files import runtime_files_dir

    real, out = runtime_files_dir(), tmp / "phase-files"
    out.mkdir()
    for name in ("requirements.lock", "synthorg_oh_events.py", "synthorg_oh_terminal.py"):
        shutil.copy(real / name, out / name)
    shutil.copy(real / "run_task.py", out / "run_task_real.py")
    shutil.copy(Path(__file__).with_name("oh_phase_entrypoint.py"), out / "run_task.py")
    return out


def _landed_phases(repo: Path) -> dict[str, float]:
    """The stamps oh_phase_entrypoint left in the workspace, from the run's landed commit."""
    git = ["git", "-C", str(repo)]
    sha = subprocess.run(
        [*git, "log", "--all", "-1", "--format=%H", "--", ".oh-bench-phases"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shown = subprocess.run(
        [*git, "show", f"{sha}:.oh-bench-phases"], capture_output=True, text=True, check=True
    )
    return dict(json.loads(shown.stdout))


def cli_run(
    runtime: OpenHandsRuntime,
    home: Path,
    config: Path,
    tmp: Path,
    n: int,
    files: Path | None = None,
) -> dict[str, float]:
    """``synthorg run --loop openhands`` as a user runs it: spawn -> first model request."""
    repo = _repo(tmp / f"cli-{n}")
    stamp_file = tmp / f"cli-stamps-{n}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(
        SYNTHORG_HOME=str(home),
        PYTHONPATH=f"{ROOT / 'src'}:{ROOT / 'benchmarks'}",
        OH_BENCH_STAMPS=str(stamp_file),
        OH_BENCH_TURNS=str(TURNS),
    )
    if files is not None:
        env["SYNTHORG_OPENHANDS_FILES"] = str(files)
    env.pop("PYTHONPYCACHEPREFIX", None)  # the tree's own bytecode (bootstrap / the warm-up)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = [
        sys.executable,
        "-m",
        "synthorg.cli.app",
        "run",
        "Write progress.txt",
        "--repo",
        str(repo),
    ]
    argv += ["--loop", "openhands", "--max-turns", str(TURNS + 5), "-c", str(config)]
    argv += ["--engine", "embedded"]  # this process, whatever serve might run for `home`
    started = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with ProcWatch(runtime.python, proc.pid) as watch:
        out, err = proc.communicate()
    assert proc.returncode == 0, out.decode()[-2000:] + err.decode()[-2000:]
    first_request = _stamps(stamp_file)[0]
    spawned = watch.seen.get("sandbox_spawned", float("nan"))
    exec_ = watch.seen.get("interpreter", float("nan"))
    out = {
        "cold_start": first_request - started,
        "control_plane": spawned - started,
        "sandbox": exec_ - spawned,
        "in_sandbox": first_request - exec_,
    }
    if files is not None:
        phases = _landed_phases(repo)
        out["interpreter"] = phases["interpreter"] - exec_
        out["sdk_import"] = phases["sdk_imported"] - phases["interpreter"]
        out["conversation"] = phases["conversation_built"] - phases["sdk_imported"]
        out["to_request"] = first_request - phases["conversation_built"]
    return out


def _cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(home), PYTHONPATH=f"{ROOT / 'src'}:{ROOT / 'benchmarks'}")
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class ServeProcess:
    """A real ``synthorg serve`` over ``home`` (pool of one): its pid, its gateway's stamps."""

    def __init__(self, home: Path, config: Path, tmp: Path) -> None:
        self.home = home
        self.stamps = tmp / "serve-stamps"
        self.log = tmp / "serve.log"
        env = _cli_env(home)
        env.update(
            OH_BENCH_STAMPS=str(self.stamps), OH_BENCH_TURNS=str(TURNS), SYNTHORG_LOG_LEVEL="INFO"
        )
        argv = [sys.executable, "-m", "synthorg.cli.app", "serve", "--port", "0"]
        with self.log.open("wb") as sink:
            self.proc = subprocess.Popen(
                [*argv, "-c", str(config)], env=env, stdout=subprocess.DEVNULL, stderr=sink
            )
        deadline = time.monotonic() + 300
        while b'"SERVER_STARTED"' not in self.log.read_bytes():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "serve never started"
            time.sleep(0.1)  # a benchmark's wait for a log line; nothing to block on

    async def settled(self) -> None:
        """Until the serve's pooled sandbox has imported the SDK and sleeps."""
        import psutil

        while True:
            slots = [p for p in psutil.Process(self.proc.pid).children() if p.name() == "bwrap"]
            if slots:
                break
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            await asyncio.sleep(0.1)
        for slot in slots:
            await _until_idle(slot.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


async def serve_run(serve: ServeProcess, config: Path, tmp: Path, n: int) -> dict[str, float]:
    """``synthorg run --loop openhands`` handed to the running serve: spawn -> first request."""
    await serve.settled()
    repo = _repo(tmp / f"via-serve-{n}")
    argv = [sys.executable, "-m", "synthorg.cli.app", "run", "Write progress.txt"]
    argv += ["--repo", str(repo), "--loop", "openhands", "--max-turns", str(TURNS + 5)]
    argv += ["-c", str(config), "--engine", "serve"]
    before = len(_stamps(serve.stamps))
    started = time.time()
    done = await asyncio.to_thread(
        subprocess.run, argv, env=_cli_env(serve.home), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"via serve pid {serve.proc.pid}" in done.stdout, done.stdout[:2000]
    return {"cold_start": _stamps(serve.stamps)[before] - started, "wall": time.time() - started}


def _tree(pid: int) -> list[Any]:
    import psutil

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


async def _until_idle(pid: int) -> None:
    """Until every thread of the slot's tree sleeps and its CPU time stops growing, twice in a
    row (it has imported the SDK and waits on stdin): a server idle since its last run. CPU
    alone is fooled on a loaded machine, where a runnable import may get no CPU for a while."""
    last, quiet = -1.0, 0
    while quiet < 2:
        tree = _tree(pid)
        now = sum(sum(p.cpu_times()[:2]) for p in tree)
        asleep = all(_threads_asleep(p.pid) for p in tree)
        quiet = quiet + 1 if asleep and now == last else 0
        last = now
        await asyncio.sleep(0.5)


def _threads_asleep(pid: int) -> bool:
    for task in Path(f"/proc/{pid}/task").iterdir():
        state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        if state not in ("S", "I"):
            return False
    return True


def pool_memory(c: Components) -> dict[str, float]:
    """USS and PSS (MiB) of every idle pooled sandbox's process tree, bwrap included."""
    assert c.sandbox_pool is not None
    slots = [slot for slots in c.sandbox_pool._idle.values() for slot in slots]
    infos = [p.memory_full_info() for slot in slots for p in _tree(slot.process.pid)]
    return {
        "uss_mib": sum(i.uss for i in infos) / 2**20,
        "pss_mib": sum(i.pss for i in infos) / 2**20,
        "rss_mib": sum(i.rss for i in infos) / 2**20,
    }


async def service_run(c: Components, tmp: Path, name: str) -> dict[str, float]:
    """A run as ``synthorg serve`` starts it: create -> first model request (in-process)."""
    if c.sandbox_pool is not None:
        await c.sandbox_pool.settle()
        for slots in c.sandbox_pool._idle.values():
            for slot in slots:
                await _until_idle(slot.process.pid)
    # Idle, between runs: what the pool costs while it waits.
    memory = pool_memory(c) if c.sandbox_pool is not None else {}
    repo = _repo(tmp / name)
    stamp_file = tmp / f"{name}-stamps"
    os.environ["OH_BENCH_STAMPS"] = str(stamp_file)
    task = Task(
        id=new_id("task"), project_id="bench", prompt="Write progress.txt", repository=str(repo)
    )
    started = time.time()
    record = await c.service.create(task, RunOptions(loop="openhands", max_turns=TURNS + 5))
    result = await c.service.run(record.id)
    assert result.termination_reason.value == "completed", result.error
    return {"cold_start": _stamps(stamp_file)[0] - started, **memory}


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _config(path: Path, pool_size: int = 0, roots: tuple[Path, ...] = ()) -> Path:
    path.write_text(
        '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\n'
        f'models = ["{MODEL}"]\nscript = "{SCRIPT}"\n'
        f"[gateway.prices.{MODEL}]\ninput_per_mtok_usd = 3\noutput_per_mtok_usd = 15\n"
        f'[run]\nmodel = "{MODEL}"\n[openhands]\npool_size = {pool_size}\n'
        f"[server]\nrepository_roots = {json.dumps([str(root) for root in roots])}\n"
    )
    return path


def _row(name: str, runs: list[dict[str, float]], keys: tuple[str, ...]) -> str:
    return f"{name:8} " + "  ".join(f"{k} {_median(runs, k):6.2f}s" for k in keys)


async def main(
    turns: int,
    reps: int,
    runtime_home: Path | None,
    per_turn: bool,
    without_bytecode: bool,
    split_sandbox: bool,
    pool: bool,
) -> None:
    global TURNS
    TURNS = turns
    os.environ["OH_BENCH_TURNS"] = str(turns)
    runtime = _runtime(runtime_home)
    with tempfile.TemporaryDirectory(prefix="oh-bench-") as raw:
        tmp = Path(raw)
        home = tmp / "home"
        home.mkdir()
        (home / "runtimes").symlink_to(runtime.venv_path.parents[1])
        config = _config(tmp / "bench.toml")
        pool_config = _config(tmp / "bench-pool.toml", pool_size=1)
        settings = _settings(home)
        pooled_home = tmp / "pooled-home"
        pooled_home.mkdir()
        (pooled_home / "runtimes").symlink_to(runtime.venv_path.parents[1])
        serve = None
        if pool:
            serve_home = tmp / "serve-home"
            serve_home.mkdir()
            (serve_home / "runtimes").symlink_to(runtime.venv_path.parents[1])
            serve_config = _config(tmp / "bench-serve.toml", pool_size=1, roots=(tmp,))
            serve = ServeProcess(serve_home, serve_config, tmp)
        sides: dict[str, list[dict[str, float]]] = {
            "run-serve": [],
            "cli-pool": [],
            "serve-cold": [],
            "serve-pool": [],
            "memory": [],
        }
        adapter: list[dict[str, float]] = []
        direct: list[dict[str, float]] = []
        cli: list[dict[str, float]] = []
        no_pyc: list[dict[str, float]] | None = [] if without_bytecode else None
        files = phase_files(tmp) if split_sandbox else None
        try:
            async with (
                boot(settings, registry=default_registry(), provisioner=default_provisioner) as c,
                boot(
                    _settings(pooled_home),
                    registry=default_registry(),
                    provisioner=default_provisioner,
                    openhands_pool="kept" if pool else "none",
                ) as pooled,
            ):
                assert c.gateway_endpoints.uds_path is not None
                server = await _forward_tcp(c.gateway_endpoints.uds_path)
                port = server.sockets[0].getsockname()[1]
                tcp_base_url = f"http://127.0.0.1:{port}/v1"
                async with server:
                    print("warm-up (not counted): one run per side fills the bytecode caches")
                    await direct_run(c, tcp_base_url, runtime, tmp, -1)
                    await asyncio.to_thread(cli_run, runtime, home, config, tmp, -1, files)
                    for n in range(reps):
                        direct.append(await direct_run(c, tcp_base_url, runtime, tmp, n))
                        cli.append(
                            await asyncio.to_thread(cli_run, runtime, home, config, tmp, n, files)
                        )
                        if pool:
                            sides["cli-pool"].append(
                                await asyncio.to_thread(
                                    cli_run, runtime, home, pool_config, tmp, n + 1000, files
                                )
                            )
                            sides["serve-cold"].append(await service_run(c, tmp, f"cold-{n}"))
                            if n == 0:
                                await service_run(pooled, tmp, "pool-warm-up")  # not counted
                            sides["serve-pool"].append(await service_run(pooled, tmp, f"pool-{n}"))
                            sides["memory"].append(sides["serve-pool"][-1])
                            assert serve is not None
                            if n == 0:
                                await serve_run(serve, serve_config, tmp, -1)  # not counted
                            sides["run-serve"].append(await serve_run(serve, serve_config, tmp, n))
                            print(f"  pool {[(k, v[-1]) for k, v in sides.items()]}")
                        if per_turn:
                            adapter.append(await adapter_run(c, tmp, n))
                        if no_pyc is not None:
                            no_pyc.append(
                                await direct_run(
                                    c, tcp_base_url, runtime, tmp, f"nopyc{n}", bytecode=False
                                )
                            )
                            print(f"  direct without bytecode {no_pyc[-1]}")
                        print(f"rep {n + 1}/{reps}: cli {cli[-1]}\n  direct {direct[-1]}")
        finally:
            if serve is not None:
                serve.stop()
    print(f"\nOpenHands cold start: spawn -> first model request, {reps} runs each (medians)")
    print(
        _row(
            "direct",
            direct,
            ("cold_start", "interpreter", "sdk_import", "import_cpu", "conversation", "to_request"),
        )
    )
    print(_row("cli", cli, ("cold_start", "control_plane", "sandbox", "in_sandbox")))
    if split_sandbox:
        print(_row("  inside", cli, ("interpreter", "sdk_import", "conversation", "to_request")))
    ratio = _median(cli, "cold_start") / _median(direct, "cold_start")
    print(f"load average (1/5/15 min): {os.getloadavg()}")
    print(f"cold-start ratio synthorg run / direct SDK: {ratio:.3f}x (target: cli <= 2 s idle)")
    if pool:
        direct_start = _median(direct, "cold_start")
        for name in ("cli-pool", "serve-cold", "serve-pool", "run-serve"):
            median = _median(sides[name], "cold_start")
            ratio = median / direct_start
            print(f"{name:10} cold_start {median:6.2f}s  ratio / direct SDK {ratio:.3f}x")
        memory = {k: _median(sides["memory"], k) for k in ("uss_mib", "pss_mib", "rss_mib")}
        print("idle pooled sandbox (MiB): " + "  ".join(f"{k} {v:.1f}" for k, v in memory.items()))
    if no_pyc:
        print(_row("no-pyc", no_pyc, ("cold_start", "sdk_import", "import_cpu", "conversation")))
        pyc_ratio = _median(no_pyc, "cold_start") / _median(direct, "cold_start")
        print(f"direct cold start without / with the venv's bytecode: {pyc_ratio:.3f}x")
    if per_turn:
        a_turn, d_turn = _median(adapter, "per_turn"), _median(direct, "per_turn")
        verdict = "OK" if a_turn / d_turn <= TARGET else "OVER TARGET"
        print(f"adapter per turn {a_turn * 1000:.1f} ms, direct {d_turn * 1000:.1f} ms")
        print(
            f"per-turn ratio adapter/direct: {a_turn / d_turn:.3f}x (target <= {TARGET}x) {verdict}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3, help="terminal turns per run")
    parser.add_argument("--reps", type=int, default=3, help="runs per side")
    parser.add_argument(
        "--runtime-home", type=Path, default=None, help="where the runtime is built"
    )
    parser.add_argument(
        "--per-turn", action="store_true", help="also the in-process adapter's per-turn cost"
    )
    parser.add_argument(
        "--without-bytecode",
        action="store_true",
        help="also the direct SDK reading no compiled bytecode (the runtime build compiles it)",
    )
    parser.add_argument(
        "--split-sandbox",
        action="store_true",
        help="the cli side runs a run_task.py that stamps its phases (oh_phase_entrypoint.py)",
    )
    parser.add_argument(
        "--pool",
        action="store_true",
        help="also with the sandbox pool: cli-pool (run), serve-cold and serve-pool",
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            args.turns,
            args.reps,
            args.runtime_home,
            args.per_turn,
            args.without_bytecode,
            args.split_sandbox,
            args.pool,
        )
    )
