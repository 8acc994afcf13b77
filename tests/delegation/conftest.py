"""The real service (store, gateway, bwrap sandbox, worktrees) around the delegation scripts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from decimal import Decimal
from pathlib import Path

import pytest

from synthorg.service.boot import Components
from tests.support import boot_real, scripted_settings

SCRIPT = "tests.delegation.scripts:delegating"
MODEL = "scripted-test"
OUTPUT_CAP = 256
"""The model's output maximum: a request's worst case (what a dead host's in-flight request
holds, and is billed once its lease ends) stays far below a child's share."""
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

Booter = Callable[..., AbstractAsyncContextManager[Components]]


@pytest.fixture
def booted(tmp_path: Path) -> Booter:
    """``async with booted(latency_ms=0, delegation={...}) as components``."""

    @asynccontextmanager
    async def start(
        latency_ms: float = 0.0, **sections: dict[str, object]
    ) -> AsyncIterator[Components]:
        settings = scripted_settings(
            tmp_path / "home", SCRIPT, model=MODEL, latency_ms=latency_ms, **sections
        )
        settings.sections["gateway"]["max_output_tokens"] = {MODEL: OUTPUT_CAP}
        async with boot_real(settings) as components:
            yield components

    return start


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose notes.txt has one distinct word per line."""
    path = tmp_path / "repo"
    path.mkdir()
    (path / "notes.txt").write_text("".join(f"{w}\n" for w in WORDS))
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "notes.txt"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "notes"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


@asynccontextmanager
async def crashing_host(
    tmp_path: Path, repo: Path, prompt: str, budget: Decimal | None = None
) -> AsyncIterator[tuple[str, Callable[[], Awaitable[None]]]]:
    """A host process (crash_driver.py, data dir ``tmp_path/home``) running a parent of
    ``prompt``: yields the parent's id and a SIGKILL of the host (waited for)."""
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(prompt)
    args = [str(tmp_path / "home"), str(repo), str(prompt_file)]
    if budget is not None:
        args.append(str(budget))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("crash_driver.py")),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None

    async def kill() -> None:
        proc.kill()  # SIGKILL
        await proc.wait()

    try:
        parent_id = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode().strip()
        yield parent_id, kill
    finally:
        if proc.returncode is None:
            await kill()
