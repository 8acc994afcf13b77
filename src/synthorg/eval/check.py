"""The hidden check: a result commit, the suite's test patch, a fresh sandbox, one verdict.

The agent never sees any of it: the check runs after the run ended, in a new directory that
holds only the result commit's files with the trusted runner files and hidden tests placed
(tree.py), inside a new sandbox with no network endpoints. A check by test ids is judged by
the judge's own pytest, per id, from a report written outside the tree (judge.py). A ``check``
command is judged by its exit code alone: it runs in a tree the agent wrote, so an agent can
subvert it (a ``unittest/`` package, ``os._exit(0)``); suites that judge untrusted agents give
test ids instead.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

from synthorg.errors import BoundaryError, ConfigError
from synthorg.eval.judge import (
    INI_NAME,
    JUDGE_ENV,
    REPORT_CAP,
    REPORT_NAME,
    judge_argv,
    pytest_args,
    verdict,
)
from synthorg.eval.suite import HiddenCheck
from synthorg.eval.tree import apply_test_patch, export_tree, prepare_tree
from synthorg.runtime.judge import JudgeRuntime
from synthorg.sandbox import SandboxLimits, SandboxRequest, SandboxStreamer

OUTPUT_CAP = 8000
"""How much of the check's stdout and stderr is kept (the tail of each)."""


@dataclass(frozen=True)
class CheckOutcome:
    """Whether the result passed, with the tail of what the check printed."""

    passed: bool
    output: str


def _fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


@dataclass(frozen=True)
class _Ran:
    returncode: int | None
    output: str


async def _run(sandbox: SandboxStreamer, request: SandboxRequest) -> _Ran:
    lines: list[str] = []
    async with sandbox.stream(request, "") as proc:
        async for line in proc:
            lines.append(line)
    ended = proc.exit
    stdout = "\n".join(lines)[-OUTPUT_CAP // 2 :]
    stderr = (ended.stderr_tail if ended else proc.stderr_tail)[-OUTPUT_CAP // 2 :]
    message = f"\n[sandbox] {ended.message}" if ended else ""
    text = stdout + (f"\n[stderr]\n{stderr}" if stderr.strip() else "") + message
    return _Ran(ended.returncode if ended else None, text)


async def run_commit_in_sandbox(
    sandbox: SandboxStreamer,
    *,
    git_dir: Path,
    commit: str,
    argv: list[str],
    scratch: Path,
    base: str | None = None,
    test_patch: str = "",
    timeout_s: float = 300.0,
) -> CheckOutcome:
    """Run ``argv`` on ``commit``'s files (plus ``test_patch`` over ``base``) in a new sandbox;
    passed = exit 0. Code an agent wrote never runs on the host: the demo's tests run so."""
    workdir = await asyncio.to_thread(_fresh_dir, scratch / "tree")
    try:
        await asyncio.to_thread(export_tree, git_dir, commit, workdir)
        if test_patch:
            await asyncio.to_thread(apply_test_patch, git_dir, base or commit, workdir, test_patch)
    except BoundaryError as exc:
        return CheckOutcome(False, str(exc))
    request = SandboxRequest(
        argv=argv,
        workspace=workdir,
        conversation_id="hidden-check",
        limits=SandboxLimits(wall_timeout_s=timeout_s),
    )
    try:
        ran = await _run(sandbox, request)
    finally:
        await asyncio.to_thread(shutil.rmtree, workdir, ignore_errors=True)
    return CheckOutcome(ran.returncode == 0, ran.output)


async def run_hidden_check(
    sandbox: SandboxStreamer,
    *,
    git_dir: Path,
    base: str,
    commit: str | None,
    check: HiddenCheck,
    scratch: Path,
    judge: JudgeRuntime | None,
    timeout_s: float = 300.0,
) -> CheckOutcome:
    """Judge ``commit`` (None: the run landed nothing, judged on ``base``)."""
    workdir = await asyncio.to_thread(_fresh_dir, scratch / "tree")
    reports = await asyncio.to_thread(_fresh_dir, scratch / "report")
    try:
        await asyncio.to_thread(
            prepare_tree,
            git_dir,
            base=base,
            commit=commit or base,
            dest=workdir,
            test_patch=check.test_patch,
        )
        if check.command is None and judge is not None:
            await asyncio.to_thread(_place_ini, judge, workdir)
        request = _request(sandbox, check, judge, workdir, reports, timeout_s)
        ran = await _run(sandbox, request)
        if check.command is not None:
            return CheckOutcome(ran.returncode == 0, ran.output)
        data = await asyncio.to_thread(_read_report, reports / REPORT_NAME)
        found = verdict(data, (*check.fail_to_pass, *check.pass_to_pass))
        return CheckOutcome(found.resolved, f"{found.summary()}\n{ran.output}")
    except BoundaryError as exc:
        return CheckOutcome(False, str(exc))
    finally:
        await asyncio.to_thread(shutil.rmtree, workdir, ignore_errors=True)
        await asyncio.to_thread(shutil.rmtree, reports, ignore_errors=True)


def _read_report(path: Path) -> bytes | None:
    """The report's bytes, never more than the cap and one (a larger one is refused unread)."""
    if path.is_symlink() or not path.is_file():
        return None
    with path.open("rb") as handle:
        return handle.read(REPORT_CAP + 1)


def _place_ini(judge: JudgeRuntime, workdir: Path) -> None:
    """The judge's ini at the tree's root, written over whatever the agent put there: paths in
    pytest options (``-o pythonpath=src``) then resolve against the tree, as a repository's own
    configuration would."""
    target = workdir / INI_NAME
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    target.write_bytes(judge.ini.read_bytes())


def _request(
    sandbox: SandboxStreamer,
    check: HiddenCheck,
    judge: JudgeRuntime | None,
    workdir: Path,
    reports: Path,
    timeout_s: float,
) -> SandboxRequest:
    limits = SandboxLimits(wall_timeout_s=timeout_s)
    if check.command is not None:
        return SandboxRequest(
            argv=["sh", "-c", check.command],
            workspace=workdir,
            env=dict(check.test_env),
            conversation_id="hidden-check",
            limits=limits,
        )
    if judge is None:
        raise ConfigError("a check by test ids needs the judge runtime (synthorg eval judge)")
    binds = [judge.venv_path]
    probe = SandboxRequest(
        argv=["true"], workspace=workdir, state_dir=reports, conversation_id="hidden-check"
    )
    state = sandbox.state_path_inside(probe)
    assert state is not None, "a state dir was requested"
    argv = judge_argv(
        python=sandbox.runtime_path_inside(binds, judge.python),
        ini=f"{sandbox.workspace_path_inside(probe)}/{INI_NAME}",
        rootdir=sandbox.workspace_path_inside(probe),
        report=f"{state}/{REPORT_NAME}",
        extra=pytest_args(check.test_command),
        test_ids=list(dict.fromkeys((*check.fail_to_pass, *check.pass_to_pass))),
    )
    return probe.model_copy(
        update={
            "argv": argv,
            "env": {**check.test_env, **JUDGE_ENV},
            "read_only_binds": [judge.interpreter_prefix],
            "runtime_binds": binds,
            "limits": limits,
        }
    )
