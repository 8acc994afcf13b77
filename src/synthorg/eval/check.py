"""The hidden check: a result commit, the suite's test patch, a fresh sandbox, one verdict.

The agent never sees any of it: the check runs after the run ended, in a new directory that
holds only the result commit's files (read from git objects, no filter, attribute or hook of
the commit applied) plus the test patch, inside a new sandbox with no network endpoints.
Files the test patch creates or changes are first restored from the base commit, so an agent
that pre-wrote a "hidden" test file (or edited a visible one the patch extends) gains nothing.

A known limit, as in SWE-bench's own harness: the check executes the agent's code, so an agent
that rewrites the test runner it is judged by (a conftest.py, a sitecustomize) can influence
the verdict. Checks that must withstand that should run an interpreter-level command that
imports only the test patch's files.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from synthorg.errors import BoundaryError
from synthorg.eval.suite import HiddenCheck
from synthorg.sandbox import SandboxLimits, SandboxRequest, SandboxStreamer
from synthorg.workspace.git import GitError, run_git_sync

_OUTPUT_TAIL = 4000
_PATCHED = re.compile(r"^(?:\+\+\+ b/|--- a/)(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class CheckOutcome:
    """Whether the result passed, with the tail of what the check printed."""

    passed: bool
    output: str


def _git(git_dir: Path, *args: str) -> bytes:
    """Plumbing on the repository's own git dir, through the project's hardened git runner
    (no hook, driver or config of the commit applies)."""
    try:
        return run_git_sync([f"--git-dir={git_dir}", *args], git_dir).stdout
    except GitError as exc:
        raise BoundaryError(f"git {args[0]} failed: {exc.stderr[-300:]}") from exc


def _safe_relative(path: str) -> PurePosixPath:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or any(p in ("", ".", "..", ".git") for p in parts):
        raise BoundaryError(f"refusing the path {path!r} from a result tree")
    return PurePosixPath(*parts)


def export_tree(git_dir: Path, commit: str, dest: Path) -> None:
    """Write ``commit``'s files into the empty ``dest`` from raw git objects.

    Blobs are read with ``cat-file`` (no smudge filter, no textconv, no export-subst); a
    symlink becomes a symlink that is never followed by this writer (git trees cannot hold a
    path below a symlink, and every path is checked anyway).
    """
    listing = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit)
    for entry in filter(None, listing.split(b"\0")):
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind != "blob":
            continue  # submodules: not part of the check
        relative = _safe_relative(raw_path.decode("utf-8", errors="surrogateescape"))
        target = dest.joinpath(*relative.parts)
        _make_parents(dest, target)
        content = _git(git_dir, "cat-file", "blob", sha)
        if mode == "120000":
            os.symlink(content, target)
            continue
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        if mode == "100755":
            os.chmod(target, 0o755)  # noqa: S103 - the commit marks it executable


def _make_parents(root: Path, target: Path) -> None:
    current = root
    for part in target.relative_to(root).parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise BoundaryError(f"refusing to write below the symlink {current.relative_to(root)}")
        current.mkdir(exist_ok=True)


def apply_test_patch(git_dir: Path, base: str, dest: Path, patch: str) -> None:
    """Restore the patch's files from ``base``, then apply the patch in ``dest``."""
    if not patch.strip():
        return
    for name in sorted(set(_PATCHED.findall(patch)) - {"/dev/null"}):
        relative = _safe_relative(name)
        target = dest.joinpath(*relative.parts)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
        try:
            blob = _git(git_dir, "cat-file", "blob", f"{base}:{relative.as_posix()}")
        except BoundaryError:
            continue  # the patch creates it
        _make_parents(dest, target)
        target.write_bytes(blob)
    done = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        input=patch.encode(),
        cwd=dest,
        capture_output=True,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_CEILING_DIRECTORIES": str(dest.parent),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "HOME": os.devnull,
        },
        check=False,
    )
    if done.returncode != 0:
        raise BoundaryError(
            "the test patch does not apply to the result: "
            + done.stderr.decode(errors="replace")[-300:]
        )


def check_argv(check: HiddenCheck) -> list[str]:
    """The command the sandbox runs for this check."""
    if check.command is not None:
        return ["sh", "-c", check.command]
    tests = " ".join(_quote(t) for t in (*check.fail_to_pass, *check.pass_to_pass))
    return ["sh", "-c", f"{check.test_command} {tests}"]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


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
    """Run ``argv`` on ``commit``'s files (plus ``test_patch`` over ``base``) in a new sandbox.

    Code an agent wrote never runs on the host: this is how the demo and the hidden check
    execute it.
    """
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
    lines: list[str] = []
    async with sandbox.stream(request, "") as proc:
        async for line in proc:
            lines.append(line)
    ended = proc.exit
    await asyncio.to_thread(shutil.rmtree, workdir, ignore_errors=True)
    passed = ended is not None and ended.returncode == 0
    return CheckOutcome(passed, "\n".join(lines)[-_OUTPUT_TAIL:])


async def run_hidden_check(
    sandbox: SandboxStreamer,
    *,
    git_dir: Path,
    base: str,
    commit: str | None,
    check: HiddenCheck,
    scratch: Path,
    timeout_s: float = 300.0,
) -> CheckOutcome:
    """Judge ``commit`` (None: the run landed nothing, judged on ``base``)."""
    return await run_commit_in_sandbox(
        sandbox,
        git_dir=git_dir,
        commit=commit or base,
        argv=check_argv(check),
        scratch=scratch,
        base=base,
        test_patch=check.test_patch,
        timeout_s=timeout_s,
    )
