"""Questions asked of a source repository: is it git, where are its dirs, what is the base."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

from synthorg.errors import UsageError
from synthorg.workspace import refs
from synthorg.workspace.git import GitError, run_git
from synthorg.workspace.objects import (
    UNKNOWN,
    InProcessUnavailable,
    probe_in_process,
    refs_in_process,
    refs_under,
)


@dataclass(frozen=True, slots=True)
class RepoProbe:
    """Where a non-bare repository keeps its files and git data."""

    toplevel: Path
    git_dir: Path
    common_dir: Path


@dataclass(frozen=True, slots=True)
class Base:
    """A resolved base: the commit and the name it was chosen by."""

    sha: str
    name: str


async def probe_repo(path: Path) -> RepoProbe | str:
    """The repository containing ``path``, or a sentence saying why there is none."""
    found = probe_in_process(path)  # the usual case, without a git process
    if found is not None:
        return RepoProbe(found[0], found[1], found[1])
    out = await run_git(
        [
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-dir",
            "--git-common-dir",
        ],
        path,
        check=False,
    )
    if out.returncode != 0:
        if "must be run in a work tree" in out.stderr:
            return "a bare repository has no working tree"
        return "not a git repository"
    lines = out.text.splitlines()
    return RepoProbe(Path(lines[0]), Path(lines[1]), Path(lines[2]))


async def resolve_commit(cwd: Path, rev: str) -> str | None:
    """The commit sha ``rev`` names, None if it names none."""
    if rev == "HEAD" or rev.startswith("refs/"):
        known = refs_in_process(cwd, lambda lib: lib.commit_of(rev))
        if known is not UNKNOWN:
            return cast("str | None", known)
    out = await run_git(
        ["rev-parse", "-q", "--verify", "--end-of-options", f"{rev}^{{commit}}"], cwd, check=False
    )
    sha = out.text.strip()
    return sha if out.returncode == 0 and sha else None


async def current_branch(cwd: Path) -> str | None:
    """The short name of the checked-out branch, None when HEAD is detached."""
    known = refs_in_process(cwd, lambda lib: lib.current_branch())
    if known is not UNKNOWN:
        return cast("str | None", known)
    out = await run_git(["symbolic-ref", "-q", "--short", "HEAD"], cwd, check=False)
    return out.text.strip() or None


async def choose_base(cwd: Path, explicit: str | None) -> Base | None:
    """The explicit ref if given (it must exist), else the current branch's HEAD.

    None means the repository has no commit yet (an unborn branch) and no base was asked.
    """
    if explicit is not None:
        sha = await resolve_commit(cwd, explicit)
        if sha is None:
            raise UsageError(
                f"base ref {explicit!r} does not name a commit in {cwd}: pass an existing "
                "branch, tag or sha, or omit it to start from the current branch"
            )
        return Base(sha, explicit)
    sha = await resolve_commit(cwd, "HEAD")
    if sha is None:
        return None
    return Base(sha, await current_branch(cwd) or "HEAD")


async def stored_base(cwd: Path, conversation_id: str) -> str | None:
    """The base commit remembered for a conversation, if any."""
    return await resolve_commit(cwd, refs.base_ref(conversation_id))


async def remember_base(cwd: Path, conversation_id: str, sha: str) -> None:
    """Record the conversation's base in its hidden ref (so a resume diffs to the same base)."""
    name = refs.base_ref(conversation_id)
    if refs_in_process(cwd, lambda lib: lib.set_ref(name, sha)) is True:
        return
    await run_git(["update-ref", refs.base_ref(conversation_id), sha], cwd)


def create_branch(cwd: Path, branch: str, sha: str) -> bool:
    """Create ``refs/heads/<branch>`` at ``sha`` in-process (create-only); False when libgit2
    cannot, or the branch exists (then ``git worktree add -b`` says so)."""
    return refs_in_process(cwd, lambda lib: lib.create_ref(f"refs/heads/{branch}", sha)) is True


async def branch_exists(cwd: Path, branch: str) -> bool:
    """Whether ``refs/heads/<branch>`` exists."""
    known = refs_in_process(cwd, lambda lib: lib.has_ref(f"refs/heads/{branch}"))
    if known is not UNKNOWN:
        return bool(known)
    out = await run_git(
        ["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], cwd, check=False
    )
    return out.returncode == 0


async def delete_refs(cwd: Path, names: list[str]) -> None:
    """Delete the given refs in one transaction (missing ones are ignored)."""
    if not names:
        return
    payload = "".join(f"delete {name}\n" for name in names).encode()
    try:
        await run_git(["update-ref", "--stdin"], cwd, stdin=payload)
    except GitError:
        # One missing ref fails the whole transaction; fall back to one at a time.
        for name in names:
            await run_git(["update-ref", "-d", name], cwd, check=False)


async def list_refs(cwd: Path, prefix: str) -> list[str]:
    """Full names of refs under ``prefix`` in the shared git dir ``cwd`` (read in-process
    when libgit2 can)."""
    try:
        return [name for name, _, _ in refs_under(cwd, prefix)]
    except InProcessUnavailable:
        pass
    out = await run_git(["for-each-ref", "--format=%(refname)", prefix], cwd)
    return out.text.split()
