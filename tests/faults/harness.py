"""Real `synthorg` processes for the fault suite: start, watch, kill, resume, and check the log."""

from __future__ import annotations

import asyncio
import collections
import io
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synthorg.domain import ActionEvent, ConversationStatus, ObservationEvent, StatusChangeEvent
from synthorg.service.demo import DEMO_TASK, create_demo_repo
from synthorg.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "tests.faults.scripts:resilient_fix"
ENDLESS = "synthorg.engine.native.scripts:endless_script"
_CONVERSATION = re.compile(r"conversation (conv-[0-9a-f]+)")
_BOOT_S = 300.0  # imports and boot on a loaded 2-core machine take tens of seconds


@dataclass(frozen=True)
class World:
    """One data dir, one store, one config: what the processes of a test share."""

    root: Path
    store_url: str
    store_extra: str = ""

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def config(self) -> Path:
        path = self.root / "synthorg.toml"
        if not path.exists():
            path.write_text(
                '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\n'
                'models = ["m", "endless"]\n'
                f'script = "{SCRIPT}"\nlatency_ms = 100\n'
                f'scripts = {{ endless = "{ENDLESS}" }}\n'
                '[run]\nmodel = "m"\nshutdown_grace_s = 0.5\n'
                '[sandbox]\nbackend = "bwrap"\n'
                f'[store]\nurl = "{self.store_url}"\n{self.store_extra}'
            )
        return path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
        env.update(SYNTHORG_HOME=str(self.home), PYTHONPATH=str(ROOT), COLUMNS="200", NO_COLOR="1")
        return env

    def repo(self, name: str) -> Path:
        return create_demo_repo(self.root / "repos" / name)


@dataclass
class Proc:
    """A running `synthorg` command, its output collected as it comes."""

    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    conversation: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    seen: dict[str, asyncio.Event] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            found = _CONVERSATION.search(line)
            if found and not self.conversation.done():
                self.conversation.set_result(found.group(1))
            for needle, event in self.seen.items():
                if needle in line:
                    event.set()

    def watch(self, needle: str) -> asyncio.Event:
        """An event set once a line containing ``needle`` is printed (from now on)."""
        return self.seen.setdefault(needle, asyncio.Event())

    async def conversation_id(self) -> str:
        """The conversation id from the header (the run is about to start)."""
        waiter = asyncio.ensure_future(asyncio.shield(self.conversation))
        racers: list[asyncio.Future[Any]] = [waiter, asyncio.ensure_future(self.proc.wait())]
        done, _ = await asyncio.wait(
            racers,
            timeout=_BOOT_S,
            return_when=asyncio.FIRST_COMPLETED,
        )
        assert waiter in done, f"no conversation id; output:\n{self.output}"
        return waiter.result()

    async def exit(self, timeout: float = 180.0) -> int:
        """Wait for the process and its output; its exit code."""
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        LIVE.discard(self.proc)
        if self.reader is not None:
            await asyncio.wait_for(self.reader, 30)
        return code


async def synthorg(
    world: World, *args: str, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Proc:
    """Start ``synthorg ARGS -c CONFIG`` with the world's data dir (``prefix``: a wrapper
    that execs it, e.g. into a network namespace: the pid stays the process's; ``env``:
    variables added to the world's, e.g. a pause point)."""
    proc = await asyncio.create_subprocess_exec(
        *prefix,
        sys.executable,
        "-m",
        "synthorg.cli.app",
        *args,
        "-c",
        str(world.config),
        env={**world.env(), **(env or {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    LIVE.add(proc)
    started = Proc(proc)
    started.reader = asyncio.create_task(started._read())
    return started


async def start_fix(world: World, repo: Path) -> Proc:
    """`synthorg run` of the demo task on ``repo`` (react loop, bwrap sandbox)."""
    return await synthorg(world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react")


async def start_endless(world: World, repo: Path) -> Proc:
    """`synthorg run` whose model never finishes (it keeps running commands)."""
    return await synthorg(
        world, "run", "keep going", "--repo", str(repo), "--model", "endless", "--max-turns", "9999"
    )


async def resume(world: World, conversation_id: str) -> Proc:
    """`synthorg run --resume ID`."""
    return await synthorg(world, "run", "--resume", conversation_id)


async def finish(world: World, conversation_id: str, repo: Path) -> None:
    """Resume until done; it must complete, and the log and the branch must be sound."""
    run = await resume(world, conversation_id)
    code = await run.exit()
    assert code == 0 and "completed" in run.output, run.output
    await check_log(world, conversation_id)
    branch_tests_pass(repo, conversation_id)


async def check_log(world: World, conversation_id: str) -> None:
    """No gap or duplicate seq; each action observed exactly once; the conversation finished."""
    store = await open_store(world.store_url)
    try:
        history = await store.history(conversation_id, limit=10_000)
        record = await store.get_conversation(conversation_id)
        owner = await store.conversation_owner(conversation_id)
    finally:
        await store.close()
    assert [s.seq for s in history] == list(range(1, len(history) + 1))
    events = [s.event for s in history]
    actions = [e.action_id for e in events if isinstance(e, ActionEvent)]
    assert len(actions) == len(set(actions)), actions
    observed = collections.Counter(e.action_id for e in events if isinstance(e, ObservationEvent))
    assert all(observed[a] == 1 for a in actions), (actions, observed)
    assert set(observed) <= set(actions)
    changes = [e for e in events if isinstance(e, StatusChangeEvent)]
    assert changes[-1].new is ConversationStatus.FINISHED, changes[-1]
    assert record.status is ConversationStatus.FINISHED
    assert owner is None  # released on the way out


def branch_tests_pass(repo: Path, conversation_id: str) -> None:
    """The branch's tree (not the worktree) passes the repository's tests."""
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", f"synthorg/{conversation_id}"],
        capture_output=True,
        check=True,
    ).stdout
    target = repo.parent / f"{conversation_id}-tree"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    tests = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"],
        cwd=target,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


_OUR_FRAME = re.compile(r'^\s*File "(?!/workspace/)[^"]+", line \d+', re.MULTILINE)


def no_traceback(output: str) -> None:
    """No Python traceback of SynthOrg's own (the agent's test output may hold some)."""
    assert not _OUR_FRAME.search(output), output


LIVE: set[asyncio.subprocess.Process] = set()
"""Processes started and not yet reaped: a failing test must not leave them running."""


async def reap_all() -> None:
    """Kill and reap whatever a test left running."""
    for proc in list(LIVE):
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        LIVE.discard(proc)
