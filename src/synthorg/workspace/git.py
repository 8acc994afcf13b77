"""Running git as a subprocess: one place that spawns git, maps failures and retries lock races."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from synthorg.errors import BoundaryError

# Variables that would silently redirect git away from the directory we name.
_SCRUBBED = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
)

# stderr fragments of git's lock-file races (index.lock, ref locks, config.lock, ...).
_LOCK_MARKERS = (
    ".lock': File exists",
    "cannot lock ref",
    "Unable to create",
    "could not lock config file",
    "Another git process seems to be running",
    "unable to write new index file",
)


class GitError(BoundaryError):
    """A git command failed; carries the command, its exit code and its stderr."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str, cwd: Path) -> None:
        self.args_list = list(args)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.cwd = cwd
        super().__init__(
            f"git {' '.join(self.args_list)} failed in {cwd} (exit {returncode}): {self.stderr}"
        )

    @property
    def is_lock_race(self) -> bool:
        """Whether the failure is a lock-file collision that a retry can clear."""
        return any(marker in self.stderr for marker in _LOCK_MARKERS)


@dataclass(frozen=True, slots=True)
class GitOutput:
    """What a finished git command printed."""

    stdout: bytes
    stderr: str
    returncode: int

    @property
    def text(self) -> str:
        """stdout decoded (surrogateescape keeps undecodable bytes round-trippable)."""
        return self.stdout.decode("utf-8", "surrogateescape")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every git child gets: the caller's minus redirections, never prompting."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    # A tool run from inside a hook or an editor must not make us inherit a pager or editor.
    env["GIT_PAGER"] = "cat"
    env["GIT_EDITOR"] = "true"
    if extra:
        env.update(extra)
    return env


async def run_git(
    args: Sequence[str],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
) -> GitOutput:
    """Run ``git <args>`` in ``cwd``; raise ``GitError`` on a non-zero exit when ``check``."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *args,
            cwd=cwd,
            env=git_env(env),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise GitError(args, -1, f"could not start git: {exc}", cwd) from exc
    try:
        out, err = await proc.communicate(stdin)
    except BaseException:
        # Cancellation must not leave a git child running behind us (it may hold a lock).
        # SIGTERM first: git removes its lock files on SIGTERM, while a SIGKILLed `git add`
        # leaves index.lock behind and the resumed run's next checkpoint fails on it.
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout=5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        raise
    result = GitOutput(out, err.decode("utf-8", "replace"), proc.returncode or 0)
    if check and result.returncode != 0:
        raise GitError(args, result.returncode, result.stderr, cwd)
    return result


async def run_git_retrying(
    args: Sequence[str],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    attempts: int = 8,
) -> GitOutput:
    """Like ``run_git`` but retries lock-file races with jittered backoff (for idempotent calls)."""
    delay = 0.01
    for attempt in range(attempts):
        try:
            return await run_git(args, cwd, env=env, stdin=stdin)
        except GitError as exc:
            if not exc.is_lock_race or attempt == attempts - 1:
                raise
        await asyncio.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 0.5)
    raise AssertionError("unreachable")  # pragma: no cover


def run_git_sync(
    args: Sequence[str],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> GitOutput:
    """Blocking variant for scripts, fixtures and benchmarks."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=git_env(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise GitError(args, -1, f"could not start git: {exc}", cwd) from exc
    result = GitOutput(proc.stdout, proc.stderr.decode("utf-8", "replace"), proc.returncode)
    if check and result.returncode != 0:
        raise GitError(args, result.returncode, result.stderr, cwd)
    return result
