"""Running git as a subprocess: the one place that spawns git, hardens it and maps failures."""

from __future__ import annotations

import asyncio
import atexit
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from synthorg.errors import BoundaryError
from synthorg.githardening import HARDENED, config_env, git_program
from synthorg.workspace.spawn import run_collect

_OBJECT_ID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def is_object_id(text: str) -> bool:
    """Whether ``text`` is a full SHA-1 or SHA-256 object id, nothing else (no newline, no
    leading ``-``): what a value read from a file or a peer must be before git is given it."""
    return _OBJECT_ID.fullmatch(text) is not None


# Inherited variables that would redirect git, add configuration or name programs to run.
_SCRUBBED_PREFIXES = ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
_SCRUBBED = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
        "GIT_CEILING_DIRECTORIES",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM",
        "GIT_CONFIG",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_EXTERNAL_DIFF",
        "GIT_DIFF_OPTS",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "GIT_PROXY_COMMAND",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
        "GIT_PAGER",
        "PAGER",
        "EDITOR",
        "VISUAL",
        "GIT_REPLACE_REF_BASE",
    }
)

# A driver's program runs when an attribute names the driver; these keys define one.
_DRIVER_KEY = re.compile(r"^(filter)\.(.*)\.(clean|smudge|process)$", re.DOTALL)


def driver_overrides(config_names: Iterable[str]) -> list[tuple[str, str]]:
    """Command-line settings that disarm every filter driver among ``config_names``.

    An empty command is "no filter" to git, and ``required=false`` keeps a disarmed driver
    from failing the command. (Diff and merge drivers run only in porcelain or with
    ``--ext-diff``/``--textconv``; host code runs only plumbing and passes ``--no-ext-diff``.)
    """
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name in config_names:
        found = _DRIVER_KEY.match(name)
        if found is None or "\n" in found.group(2):
            continue
        driver = found.group(2)
        if driver in seen:
            continue
        seen.add(driver)
        for key in ("clean", "smudge", "process"):
            out.append((f"filter.{driver}.{key}", ""))
        out.append((f"filter.{driver}.required", "false"))
    return out


@dataclass(frozen=True, slots=True)
class CheckoutDirs:
    """The recorded directories of a checkout: git is told them, never left to discover them."""

    work_tree: Path
    git_dir: Path
    common_dir: Path


class _Control:
    """A private directory of this process: the controlled global config and an empty hooks dir."""

    def __init__(self) -> None:
        root = Path(tempfile.mkdtemp(prefix="synthorg-git-"))  # 0700, host-only
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        self.hooks = root / "hooks"
        self.hooks.mkdir(mode=0o700)
        self.config = root / "config"
        # Read as the global config: ownership checks (safe.directory) are honoured only from a
        # protected scope, and worktree files may belong to the sandbox's uid.
        self.config.write_text(
            "[safe]\n\tdirectory = *\n[core]\n\thooksPath = "
            + str(self.hooks)
            + "\n\tfsmonitor = false\n",
            encoding="utf-8",
        )

    def usable(self) -> bool:
        return self.config.is_file() and self.hooks.is_dir() and not any(self.hooks.iterdir())


_CONTROL: _Control | None = None


def _control() -> _Control:
    global _CONTROL
    if _CONTROL is None or not _CONTROL.usable():
        _CONTROL = _Control()
    return _CONTROL


def control_config() -> Path:
    """The global config every host git reads: this process's own, written once."""
    return _control().config


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


def git_env(
    extra: Mapping[str, str] | None = None,
    *,
    checkout: CheckoutDirs | None = None,
    overrides: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """The environment of every git child SynthOrg starts: the one place git is hardened.

    No system config; a controlled global config; command-line settings that turn off hooks,
    fsmonitor, pagers, editors, credential helpers, transports and signing programs (plus
    ``overrides``, e.g. disarmed filter drivers); no prompts. With ``checkout``, git is told
    the recorded git dir, common dir and work tree, so nothing in the work tree (its ``.git``
    file included) can point it elsewhere.
    """
    env = dict(_inherited())
    env.update(_hardening(_control(), tuple(overrides)))
    if checkout is not None:
        env["GIT_DIR"] = str(checkout.git_dir)
        env["GIT_COMMON_DIR"] = str(checkout.common_dir)
        env["GIT_WORK_TREE"] = str(checkout.work_tree)
    if extra:
        env.update(extra)
    return env


def _inherited() -> dict[str, str]:
    """os.environ without the variables that would redirect git (read at each spawn: the
    environment may change, and ~0.1 ms a spawn is not worth a cache keyed on private state)."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)
    }


_HARDENING: tuple[_Control, dict[str, str]] | None = None


def _hardening(control: _Control, overrides: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The variables ``git_env`` sets over the inherited ones. Without ``overrides`` the same
    for every git process of ``control``: built once (36 settings, ~0.1 ms per spawn)."""
    global _HARDENING
    if not overrides and _HARDENING is not None and _HARDENING[0] is control:
        return _HARDENING[1]
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": str(control.config),
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "false",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "true",
        "GIT_PROTOCOL_FROM_USER": "0",
        "LC_ALL": "C",
    }
    env.update(config_env([("core.hooksPath", str(control.hooks)), *HARDENED, *overrides]))
    if not overrides:
        _HARDENING = (control, env)
    return env


async def run_git(
    args: Sequence[str],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
    checkout: CheckoutDirs | None = None,
    overrides: Sequence[tuple[str, str]] = (),
) -> GitOutput:
    """Run ``git <args>`` in ``cwd``; raise ``GitError`` on a non-zero exit when ``check``."""
    # Cancellation must not leave a git child running behind us (it may hold a lock):
    # run_collect sends SIGTERM first (git removes its lock files on SIGTERM, while a
    # SIGKILLed `git add` leaves index.lock behind and the resumed run's next checkpoint
    # fails on it), SIGKILL after a grace, and reaps it.
    try:
        returncode, out, err = await run_collect(
            [git_program(), *args],
            cwd=cwd,
            env=git_env(env, checkout=checkout, overrides=overrides),
            stdin=stdin,
        )
    except OSError as exc:
        raise GitError(args, -1, f"could not start git: {exc}", cwd) from exc
    result = GitOutput(out, err.decode("utf-8", "replace"), returncode)
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
    checkout: CheckoutDirs | None = None,
    overrides: Sequence[tuple[str, str]] = (),
) -> GitOutput:
    """Like ``run_git`` but retries lock-file races with jittered backoff (for idempotent calls)."""
    delay = 0.01
    for attempt in range(attempts):
        try:
            return await run_git(
                args, cwd, env=env, stdin=stdin, checkout=checkout, overrides=overrides
            )
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
    stdin: bytes | None = None,
    check: bool = True,
    overrides: Sequence[tuple[str, str]] = (),
) -> GitOutput:
    """Blocking variant for scripts, fixtures, benchmarks and the eval's worker threads."""
    try:
        proc = subprocess.run(
            [git_program(), *args],
            cwd=cwd,
            env=git_env(env, overrides=overrides),
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise GitError(args, -1, f"could not start git: {exc}", cwd) from exc
    result = GitOutput(proc.stdout, proc.stderr.decode("utf-8", "replace"), proc.returncode)
    if check and result.returncode != 0:
        raise GitError(args, result.returncode, result.stderr, cwd)
    return result
