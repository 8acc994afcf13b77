"""Per-conversation git worktrees: creation (or running in place), reattachment, removal."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from synthorg.errors import ConflictError, NotFoundError
from synthorg.workspace import refs
from synthorg.workspace.git import GitError, run_git, run_git_retrying
from synthorg.workspace.locks import exclusive
from synthorg.workspace.models import Workspace
from synthorg.workspace.repo import (
    RepoProbe,
    branch_exists,
    choose_base,
    current_branch,
    delete_refs,
    list_refs,
    probe_repo,
    remember_base,
    resolve_commit,
    stored_base,
)
from synthorg.workspace.snapshot import forget, state_dir

_METADATA = "workspace.json"


def _gitdir_of(worktree: Path) -> Path | None:
    """The private git dir a linked worktree's ``.git`` file points at (read, no subprocess)."""
    dotgit = worktree / ".git"
    if not dotgit.is_file():
        return None
    text = dotgit.read_text(encoding="utf-8").strip()
    if not text.startswith("gitdir: "):
        return None
    gitdir = Path(text.removeprefix("gitdir: "))
    return gitdir if gitdir.is_absolute() else (worktree / gitdir).resolve()


_NOT_A_WORKTREE = Path("/nonexistent/not-a-worktree")


def _existing_dir(path: Path) -> Path:
    path = path.expanduser().absolute()
    if not path.is_dir():
        raise NotFoundError(f"workspace directory {path} does not exist")
    return path


def _live_gitdir(target: Path) -> Path | None:
    """``target``'s git dir; None if nothing is there; ``_NOT_A_WORKTREE`` if something else is."""
    if not target.exists():
        return None
    git_dir = _gitdir_of(target)
    if git_dir is not None and git_dir.is_dir():
        return git_dir
    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()  # an empty leftover directory is no conflict
        return None
    return _NOT_A_WORKTREE


def _common_dir_of(git_dir: Path) -> Path | None:
    """The shared git dir a linked worktree's admin dir names in its ``commondir`` file."""
    try:
        text = (git_dir / "commondir").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return (git_dir / text).resolve()


def _read_metadata(git_dir: Path) -> Workspace | None:
    try:
        raw = (state_dir(git_dir) / _METADATA).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return Workspace.model_validate_json(raw)


def _write_metadata(ws: Workspace) -> None:
    assert ws.git_dir is not None
    directory = state_dir(ws.git_dir)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (_METADATA + ".tmp")
    tmp.write_text(ws.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(directory / _METADATA)


class WorktreeManager:
    """Gives each conversation its own worktree under ``<home>/worktrees``.

    Worktrees live at ``<home>/worktrees/<conversation-id>/<project-name>`` on branch
    ``synthorg/<conversation-id>``. Registering worktrees is serialised per repository (git
    picks admin-dir names with a racy stat-then-mkdir, and branch creation takes ref locks);
    populating the files, the expensive part, runs outside that lock so creations overlap.
    """

    def __init__(self, home: Path, *, checkout_workers: int = 0) -> None:
        self.home = home.expanduser().absolute()
        self.root = self.home / "worktrees"
        # 0 lets git use one checkout worker per core; 1 is git's sequential default.
        self.checkout_workers = checkout_workers

    def path_for(self, conversation_id: str, project_name: str) -> Path:
        """Where the conversation's worktree of ``project_name`` lives."""
        return self.root / refs.check_conversation_id(conversation_id) / project_name

    async def create(
        self,
        repo: Path,
        conversation_id: str,
        *,
        base_ref: str | None = None,
        enabled: bool = True,
    ) -> Workspace:
        """The conversation's workspace for ``repo``: reused if it exists, else made.

        A non-git directory, a bare repository, a repository without commits or
        ``enabled=False`` run in the supplied directory, and the workspace's note says why.
        """
        refs.check_conversation_id(conversation_id)
        repo = _existing_dir(repo)
        probe = await probe_repo(repo)
        if isinstance(probe, str):
            return Workspace(
                conversation_id=conversation_id,
                path=repo,
                note=f"{probe}: running in place in {repo}, no worktree, views or checkpoints",
            )
        if not enabled:
            return await self._in_place(
                repo, probe, conversation_id, base_ref, "worktrees disabled: running in place"
            )
        target = self.path_for(conversation_id, probe.toplevel.name)
        async with exclusive(self.home / "locks" / f"{conversation_id}.lock"):
            existing = await self._attached(target, probe)
            if existing is not None:
                return existing
            base = await choose_base(probe.toplevel, base_ref)
            if base is None:
                return await self._in_place(
                    repo,
                    probe,
                    conversation_id,
                    None,
                    "repository has no commits yet: running in place",
                )
            branch = refs.branch_name(conversation_id)
            async with exclusive(state_dir(probe.common_dir) / "worktrees.lock"):
                note = "new worktree"
                if await branch_exists(probe.toplevel, branch):
                    # A kept branch from an earlier life of this conversation: resume it.
                    args = ["worktree", "add", "--no-checkout", str(target), branch]
                    base_sha = await stored_base(probe.toplevel, conversation_id) or base.sha
                    note = "worktree recreated on the existing branch"
                else:
                    args = ["worktree", "add", "--no-checkout", "-b", branch, str(target), base.sha]
                    base_sha = base.sha
                await self._add_worktree(probe, target, args)
                await remember_base(probe.toplevel, conversation_id, base_sha)
            git_dir = _gitdir_of(target)
            if git_dir is None:
                raise ConflictError(f"git did not register {target} as a worktree")
            await self._populate(target)
            ws = Workspace(
                conversation_id=conversation_id,
                path=target,
                repo=probe.toplevel,
                branch=branch,
                base_ref=base_sha,
                base_ref_name=base.name if base_sha == base.sha else refs.base_ref(conversation_id),
                is_worktree=True,
                note=note,
                git_dir=git_dir,
                common_dir=probe.common_dir,
            )
            _write_metadata(ws)
            return ws

    async def reattach(
        self, repo: Path, conversation_id: str, *, base_ref: str | None = None
    ) -> Workspace:
        """Resume: the existing worktree of the conversation (``create`` reuses it)."""
        return await self.create(repo, conversation_id, base_ref=base_ref)

    async def get(self, conversation_id: str, project_name: str | None = None) -> Workspace | None:
        """The conversation's existing worktree, None if it has none."""
        directory = self.root / refs.check_conversation_id(conversation_id)
        if project_name is not None:
            candidates = [directory / project_name]
        elif directory.is_dir():
            candidates = sorted(p for p in directory.iterdir() if not p.name.startswith("."))
        else:
            candidates = []
        for candidate in candidates:
            git_dir = _gitdir_of(candidate)
            if git_dir is not None:
                ws = _read_metadata(git_dir)
                if ws is not None:
                    return ws.model_copy(update={"note": "reattached to the existing worktree"})
        return None

    async def remove(self, workspace: Workspace, *, delete_branch: bool = False) -> None:
        """Remove the conversation's worktree; its branch (and checkpoints) stay unless asked.

        A workspace run in place is never deleted: it is the user's directory.
        """
        if not workspace.is_worktree or workspace.common_dir is None:
            return
        common = workspace.common_dir
        forget(workspace)
        async with exclusive(state_dir(common) / "worktrees.lock"):
            if workspace.path.exists():
                out = await run_git(
                    ["worktree", "remove", "--force", "--force", str(workspace.path)],
                    common,
                    check=False,
                )
                if out.returncode != 0:
                    # e.g. a worktree holding submodules: git refuses, we delete and prune.
                    shutil.rmtree(workspace.path, ignore_errors=True)
            await run_git(["worktree", "prune"], common)
            if delete_branch:
                cid = workspace.conversation_id
                names = [f"refs/heads/{refs.branch_name(cid)}", refs.base_ref(cid)]
                names += await list_refs(common, refs.checkpoint_prefix(cid))
                await delete_refs(common, names)
        with contextlib.suppress(OSError):
            workspace.path.parent.rmdir()  # only succeeds when no other project is left

    async def _attached(self, target: Path, probe: RepoProbe) -> Workspace | None:
        """The worktree already at ``target`` if it belongs to this repository."""
        git_dir = _live_gitdir(target)
        if git_dir is None:
            return None
        if git_dir is _NOT_A_WORKTREE:
            raise ConflictError(
                f"{target} exists but is not a live worktree of {probe.toplevel}: "
                "remove that directory, or use another conversation id"
            )
        ws = _read_metadata(git_dir)
        if ws is not None and ws.common_dir == probe.common_dir:
            return ws.model_copy(update={"note": "reattached to the existing worktree"})
        if ws is None and _common_dir_of(git_dir) == probe.common_dir.resolve():
            # Registered but never handed out (metadata is written last): finish the job.
            return await self._finish(target, git_dir, probe)
        raise ConflictError(
            f"{target} is a worktree of another repository or not SynthOrg's: remove it "
            f"with `git worktree remove --force {target}` and retry"
        )

    async def _finish(self, target: Path, git_dir: Path, probe: RepoProbe) -> Workspace:
        cid = target.parent.name
        base_sha = await stored_base(probe.toplevel, cid)
        if base_sha is None:
            base_sha = await resolve_commit(target, "HEAD")
        await self._populate(target)
        ws = Workspace(
            conversation_id=cid,
            path=target,
            repo=probe.toplevel,
            branch=await current_branch(target),
            base_ref=base_sha,
            base_ref_name=refs.base_ref(cid),
            is_worktree=True,
            note="finished an interrupted worktree creation",
            git_dir=git_dir,
            common_dir=probe.common_dir,
        )
        _write_metadata(ws)
        return ws

    async def _add_worktree(self, probe: RepoProbe, target: Path, args: list[str]) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            await run_git_retrying(args, probe.toplevel)
        except GitError as exc:
            if "already registered" in exc.stderr:
                # The directory was deleted by hand; git still lists it. Forget it and retry.
                await run_git(["worktree", "prune"], probe.toplevel)
                await run_git_retrying(args, probe.toplevel)
            elif "already checked out" in exc.stderr or "already used by worktree" in exc.stderr:
                raise ConflictError(
                    f"branch of this conversation is checked out elsewhere: {exc.stderr}"
                ) from exc
            else:
                raise

    async def _populate(self, target: Path) -> None:
        """Check the files out (what ``git worktree add`` does after registering)."""
        await run_git(
            [
                "-c",
                f"checkout.workers={self.checkout_workers}",
                "-c",
                "core.fsmonitor=false",
                "reset",
                "--hard",
                "--quiet",
                "--no-recurse-submodules",
            ],
            target,
        )

    async def _in_place(
        self,
        path: Path,
        probe: RepoProbe,
        conversation_id: str,
        explicit_base: str | None,
        note: str,
    ) -> Workspace:
        """A git workspace in the supplied directory (no worktree, no new branch)."""
        base_sha: str | None
        if explicit_base is not None:
            base = await choose_base(probe.toplevel, explicit_base)
            base_sha, base_name = (base.sha, base.name) if base else (None, None)
        else:
            base_sha = await stored_base(probe.toplevel, conversation_id)
            base_name = refs.base_ref(conversation_id) if base_sha else None
            if base_sha is None:
                base_sha = await resolve_commit(probe.toplevel, "HEAD")
                base_name = (await current_branch(probe.toplevel) or "HEAD") if base_sha else None
        if base_sha is not None:
            await remember_base(probe.toplevel, conversation_id, base_sha)
        return Workspace(
            conversation_id=conversation_id,
            path=path,
            repo=probe.toplevel,
            branch=await current_branch(probe.toplevel),
            base_ref=base_sha,
            base_ref_name=base_name,
            is_worktree=False,
            note=f"{note} in {path}",
            git_dir=probe.git_dir,
            common_dir=probe.common_dir,
        )
