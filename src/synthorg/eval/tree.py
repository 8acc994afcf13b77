"""The judged tree: a result commit's files from raw git objects, runner files from the base.

The tree the hidden check runs on holds only the result commit's files, read from git objects
(no filter, attribute or hook of the commit applied), without anything that could stand in for
the runner or the hidden tests: no ``__pycache__``/``.pyc`` (an unchecked hash-based pyc would
replace a module's source), and every ``conftest.py`` as the base commit has it (the agent's own
are dropped). Files the test patch creates or changes are first restored from the base commit,
so an agent that pre-wrote a "hidden" test file (or edited a visible one the patch extends)
gains nothing; then the patch is applied.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path, PurePosixPath

from synthorg.errors import BoundaryError
from synthorg.workspace.git import GitError, run_git_sync

_PATCHED = re.compile(r"^(?:\+\+\+ b/|--- a/)(.+?)\s*$", re.MULTILINE)
_RUNNER_FILES = frozenset({"conftest.py"})
"""Files pytest loads as its own configuration: only the trusted copies are placed."""


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


def _blobs(git_dir: Path, commit: str) -> list[tuple[str, str, PurePosixPath]]:
    """(mode, sha, path) of every file of ``commit`` (submodules are not part of a check)."""
    listing = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit)
    blobs = []
    for entry in filter(None, listing.split(b"\0")):
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind == "blob":
            path = _safe_relative(raw_path.decode("utf-8", errors="surrogateescape"))
            blobs.append((mode, sha, path))
    return blobs


def _agent_may_not_supply(path: PurePosixPath) -> bool:
    return (
        path.name in _RUNNER_FILES or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo")
    )


def export_tree(git_dir: Path, commit: str, dest: Path, *, trusted: bool = True) -> None:
    """Write ``commit``'s files into the empty ``dest`` from raw git objects.

    Blobs are read with ``cat-file`` (no smudge filter, no textconv, no export-subst); a
    symlink becomes a symlink that is never followed by this writer (git trees cannot hold a
    path below a symlink, and every path is checked anyway). An untrusted commit's runner
    files and bytecode are left out (``place_runner_files`` writes the base's).
    """
    for mode, sha, relative in _blobs(git_dir, commit):
        if not trusted and _agent_may_not_supply(relative):
            continue
        _write_blob(git_dir, dest, mode, sha, relative)


def place_runner_files(git_dir: Path, base: str, dest: Path) -> None:
    """Write the base commit's conftest.py files into ``dest`` (before the test patch)."""
    for mode, sha, relative in _blobs(git_dir, base):
        if relative.name in _RUNNER_FILES:
            target = dest.joinpath(*relative.parts)
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            _write_blob(git_dir, dest, mode, sha, relative)


def prepare_tree(git_dir: Path, *, base: str, commit: str, dest: Path, test_patch: str) -> None:
    """The judged tree of an agent's ``commit``: its files, the base's runner files, the patch."""
    export_tree(git_dir, commit, dest, trusted=False)
    place_runner_files(git_dir, base, dest)
    apply_test_patch(git_dir, base, dest, test_patch)


def _write_blob(git_dir: Path, dest: Path, mode: str, sha: str, relative: PurePosixPath) -> None:
    target = dest.joinpath(*relative.parts)
    _make_parents(dest, target)
    content = _git(git_dir, "cat-file", "blob", sha)
    if mode == "120000":
        os.symlink(content, target)
        return
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
    try:
        # No repository is found above the judged tree (whose config would then be read).
        run_git_sync(
            ["apply", "--whitespace=nowarn", "-"],
            dest,
            env={"GIT_CEILING_DIRECTORIES": str(dest.parent)},
            stdin=patch.encode(),
        )
    except GitError as exc:
        raise BoundaryError(
            "the test patch does not apply to the result: " + exc.stderr[-300:]
        ) from exc
