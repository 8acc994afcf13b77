"""Per-conversation git worktrees: creation (or running in place), reattachment, removal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path

from synthorg.domain.conversation import WorkspaceInfo
from synthorg.errors import ConflictError, NotFoundError, UsageError
from synthorg.faultpoints import pause_point
from synthorg.workspace import refs
from synthorg.workspace.checkout import open_checkout, repo_identity, verify
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.creating import CreationMarker, clear_marker, read_marker, write_marker
from synthorg.workspace.errors import UnsuitableRepositoryError, WorkspaceTamperedError
from synthorg.workspace.git import GitError, run_git, run_git_retrying
from synthorg.workspace.index_file import BIG_TREE_ENTRIES, index_entries
from synthorg.workspace.locks import exclusive
from synthorg.workspace.mirror import Mirrors
from synthorg.workspace.models import Workspace
from synthorg.workspace.repo import (
    RepoProbe,
    branch_exists,
    choose_base,
    create_branch,
    delete_refs,
    list_refs,
    probe_repo,
    remember_base,
    stored_base,
)
from synthorg.workspace.snapshot import forget, state_dir

_METADATA_SUFFIX = ".workspace.json"
_NO_WORKTREE_HINT = (
    'pass --no-worktree (API: "worktree": false) to let the agent edit the directory in '
    "place, with no checkpoints, no views and no commit"
)


def _existing_dir(path: Path) -> Path:
    path = path.expanduser().absolute()
    if not path.is_dir():
        raise NotFoundError(f"workspace directory {path} does not exist")
    return path


def _registered_gitdir(worktree: Path) -> Path:
    """The admin dir git just wrote into a new worktree's ``.git`` file (before any sandbox)."""
    text = (worktree / ".git").read_text(encoding="utf-8").strip()
    if not text.startswith("gitdir: ") or not Path(text.removeprefix("gitdir: ")).is_absolute():
        raise ConflictError(f"git did not register {worktree} as a worktree ({text[:80]!r})")
    return Path(text.removeprefix("gitdir: "))


class WorktreeManager:
    """Gives each conversation its own worktree under ``<home>/worktrees``.

    Worktrees live at ``<home>/worktrees/<conversation-id>/<project-name>`` on branch
    ``synthorg/<conversation-id>``. What decides mounts and git dirs is recorded beside the
    worktree, in ``<home>/worktrees/<conversation-id>/.<project-name>.workspace.json``: a
    host-only file the sandbox (which sees the worktree alone) cannot write. Registering
    worktrees is serialised per repository (git picks admin-dir names with a racy
    stat-then-mkdir, and branch creation takes ref locks); populating the files, the
    expensive part, runs outside that lock so creations overlap. Creation is all-or-nothing,
    also when the process is killed half-way: a marker written before anything is made
    (``workspace/creating.py``) lets the next creation remove exactly what the dead one made.
    """

    def __init__(
        self, home: Path, *, checkout_workers: int = 0, mirrors: Mirrors | None = None
    ) -> None:
        self.home = home.expanduser().absolute()
        self.root = self.home / "worktrees"
        # 0 lets git use one checkout worker per core; 1 is git's sequential default.
        self.checkout_workers = checkout_workers
        self.mirrors = mirrors
        """This worker's mirrors of remote projects (worktrees of those travel)."""

    def _project_of(self, repo: Path) -> str | None:
        return self.mirrors.project_of(repo) if self.mirrors is not None else None

    def path_for(self, conversation_id: str, project_name: str) -> Path:
        """Where the conversation's worktree of ``project_name`` lives."""
        return self.root / refs.check_conversation_id(conversation_id) / project_name

    def _metadata_file(self, conversation_id: str, project_name: str) -> Path:
        return _metadata_file(self.path_for(conversation_id, project_name))

    def check_mountable(self, path: Path, *, in_place: bool) -> None:
        """Refuse what must never be mounted or probed.

        In place (mounted read-write): the data dir, its parents and its children. As a
        worktree's source (only its commits are checked out): the data dir itself and the
        worktrees, which the agents write (git would discover a git dir one of them built).
        """
        home = self.home.resolve()
        real = path.resolve()
        if in_place:
            refused = real == home or home in real.parents or real in home.parents
        else:
            worktrees = self.root.resolve()
            refused = real in (home, worktrees) or worktrees in real.parents
        if refused:
            raise UsageError(
                f"refusing {path}: it is SynthOrg's data dir {home}, "
                + ("a parent or a child of it" if in_place else "or one of its worktrees")
                + " (keys, store, other conversations). Use a repository elsewhere"
            )

    async def create(
        self,
        repo: Path,
        conversation_id: str,
        *,
        base_ref: str | None = None,
        enabled: bool = True,
        from_remote: bool = False,
    ) -> Workspace:
        """The conversation's workspace for ``repo``: reused if it exists, else made.

        ``from_remote`` (a resume of a remote project): the mirror and the conversation's
        refs were just fetched from the remote, so neither is fetched nor published again.

        A non-git directory, a bare repository or one without commits is refused unless
        ``enabled=False`` asks to edit the directory in place (then host git never runs
        there: the agent can write its ``.git``). A failure after the branch or worktree was
        made removes them again.
        """
        refs.check_conversation_id(conversation_id)
        repo = _existing_dir(repo)
        self.check_mountable(repo, in_place=not enabled)
        if not enabled:
            return _in_place(repo, conversation_id)
        project = self._project_of(repo)
        if project is not None and not from_remote:
            assert self.mirrors is not None
            await self.mirrors.ensure(project)  # the project's branch, fresh from its remote
        probe = await probe_repo(repo)
        if isinstance(probe, str):
            raise UnsuitableRepositoryError(
                f"cannot make a worktree of {repo}: {probe}; " + _NO_WORKTREE_HINT
            )
        self.check_mountable(probe.toplevel, in_place=False)
        target = self.path_for(conversation_id, probe.toplevel.name)
        async with exclusive(self.home / "locks" / f"{conversation_id}.lock"):
            await self._settle_unfinished(probe, target)
            existing = self._load(conversation_id, probe.toplevel.name)
            if existing is not None and not (target.exists() or target.is_symlink()):
                # Deleted by hand: forget the record; the kept branch is checked out again.
                self._metadata_file(conversation_id, probe.toplevel.name).unlink()
                existing = None
            if existing is not None:
                if existing.common_dir != probe.common_dir:
                    raise ConflictError(
                        f"{target} is a worktree of another repository: delete the "
                        "conversation, or use another conversation id"
                    )
                verify(existing)
                return existing.model_copy(update={"note": "reattached to the existing worktree"})
            adopted = await self._adopt(probe, target, conversation_id)
            if adopted is not None:
                return adopted
            if target.exists() or target.is_symlink():
                raise ConflictError(
                    f"{target} exists but SynthOrg has no record of it: remove that directory "
                    "(`git worktree remove --force` if git lists it), or use another id"
                )
            base = await choose_base(probe.toplevel, base_ref)
            if base is None:
                raise UnsuitableRepositoryError(
                    f"cannot make a worktree of {repo}: the repository has no commits yet "
                    "(commit something first); or " + _NO_WORKTREE_HINT
                )
            ws = await self._make(probe, target, conversation_id, base.sha, base.name)
            if project is not None and not from_remote:
                await self._publish_new(ws)
            return ws

    async def _publish_new(self, ws: Workspace) -> None:
        """Put a new worktree's branch and base on the remote (a retry elsewhere needs the
        base even before the first checkpoint); all-or-nothing like the creation."""
        assert self.mirrors is not None
        try:
            await self.mirrors.publish(ws)
        except BaseException:
            await asyncio.shield(self.remove(ws, delete_branch=True))
            raise

    async def _settle_unfinished(self, probe: RepoProbe, target: Path) -> None:
        """A creation of ``target`` that was killed before its record was written: what it
        made (its worktree, git's registration, the refs it created) is removed, so this
        creation starts from scratch instead of adopting half-checked-out files."""
        marker = read_marker(target)
        if marker is None:
            return
        if self._load(marker.conversation_id, target.name) is not None:
            clear_marker(target)  # it finished: only the marker's removal was lost
            return
        if marker.common_dir != probe.common_dir or marker.path != target:
            raise ConflictError(
                f"{target} was being made for another repository ({marker.common_dir}): "
                "delete the conversation, or use another conversation id"
            )
        await self._undo(probe, target, self._admin_dir(probe, target), list(marker.refs))

    async def _make(
        self, probe: RepoProbe, target: Path, conversation_id: str, sha: str, name: str
    ) -> Workspace:
        branch = refs.branch_name(conversation_id)
        made_refs: list[str] = []
        git_dir: Path | None = None
        try:
            async with exclusive(state_dir(probe.common_dir) / "worktrees.lock"):
                note = "new worktree"
                base_sha, base_name = sha, name
                kept = await branch_exists(probe.toplevel, branch)
                stored = await stored_base(probe.toplevel, conversation_id)
                # Only refs that do not exist yet are this creation's to remove on undo.
                if not kept:
                    made_refs.append(f"refs/heads/{branch}")
                if stored is None:
                    made_refs.append(refs.base_ref(conversation_id))
                write_marker(
                    CreationMarker(
                        conversation_id=conversation_id,
                        path=target,
                        common_dir=probe.common_dir,
                        refs=tuple(made_refs),
                    )
                )
                if kept:
                    # A kept branch from an earlier life of this conversation: resume it.
                    args = ["worktree", "add", "--no-checkout", str(target), branch]
                    if stored is not None:
                        base_sha, base_name = stored, refs.base_ref(conversation_id)
                    note = "worktree recreated on the existing branch"
                # The branch written in-process: ``worktree add -b`` starts a
                # ``git branch`` process for it.
                elif create_branch(probe.toplevel, branch, sha):
                    args = ["worktree", "add", "--no-checkout", str(target), branch]
                else:
                    args = ["worktree", "add", "--no-checkout", "-b", branch, str(target), sha]
                await self._add_worktree(probe, target, args)
                git_dir = _registered_gitdir(target)
                await remember_base(probe.toplevel, conversation_id, base_sha)
            await pause_point("worktree-registered")
            ws = Workspace(
                conversation_id=conversation_id,
                path=target,
                repo=probe.toplevel,
                branch=branch,
                base_ref=base_sha,
                base_ref_name=base_name,
                is_worktree=True,
                note=note,
                git_dir=git_dir,
                common_dir=probe.common_dir,
                repo_identity=repo_identity(probe.common_dir),
            )
            await self._populate(ws)
            self._write_metadata(ws)
            clear_marker(target)
            return ws
        except BaseException:
            await asyncio.shield(self._undo(probe, target, git_dir, made_refs))
            raise

    async def _adopt(
        self, probe: RepoProbe, target: Path, conversation_id: str
    ) -> Workspace | None:
        """A worktree made before records lived beside it (or whose record was lost).

        Found from git's host-only admin dirs, never from the worktree's ``.git`` file, and
        only adopted when that file still says exactly what git wrote.
        """
        base = await stored_base(probe.toplevel, conversation_id)
        # A stat of a local dir on an adoption path: not worth a thread hop.
        if base is None or not target.is_dir():  # noqa: ASYNC240
            return None
        admin = self._admin_dir(probe, target)
        if admin is not None:
            ws = Workspace(
                conversation_id=conversation_id,
                path=target,
                repo=probe.toplevel,
                branch=refs.branch_name(conversation_id),
                base_ref=base,
                base_ref_name=refs.base_ref(conversation_id),
                is_worktree=True,
                note="adopted an existing worktree",
                git_dir=admin,
                common_dir=probe.common_dir,
                repo_identity=repo_identity(probe.common_dir),
            )
            verify(ws)  # its .git file must be exactly what git wrote
            self._write_metadata(ws)
            return ws
        return None

    @staticmethod
    def _admin_dir(probe: RepoProbe, target: Path) -> Path | None:
        """Git's host-only admin dir that registers ``target`` (never read from the
        worktree's own ``.git`` file); None when git registers no worktree there."""
        admin_root = probe.common_dir / "worktrees"
        if not admin_root.is_dir():
            return None
        expected = os.fsencode(target / ".git")
        for admin in sorted(admin_root.iterdir()):
            try:
                if (admin / "gitdir").read_bytes().strip() == expected:
                    return admin
            except OSError:
                continue
        return None

    async def _undo(
        self, probe: RepoProbe, target: Path, git_dir: Path | None, made_refs: list[str]
    ) -> None:
        """Remove what a failed creation made: worktree files, git's registration, refs."""
        with contextlib.suppress(OSError):
            self._metadata_file(target.parent.name, target.name).unlink()
        shutil.rmtree(target, ignore_errors=True)
        if git_dir is not None:
            shutil.rmtree(git_dir, ignore_errors=True)
        with contextlib.suppress(GitError):
            await run_git(["worktree", "prune"], probe.common_dir)
            await delete_refs(probe.common_dir, made_refs)
            clear_marker(target)  # kept when git failed: the next creation undoes it again
        with contextlib.suppress(OSError):
            target.parent.rmdir()

    async def reattach(
        self, repo: Path, conversation_id: str, *, base_ref: str | None = None
    ) -> Workspace:
        """Resume: the existing worktree of the conversation (``create`` reuses it)."""
        return await self.create(repo, conversation_id, base_ref=base_ref)

    async def resume(
        self, repo: Path, conversation_id: str, recorded: WorkspaceInfo | None
    ) -> Workspace:
        """The workspace a resumed run works in, from host-only records, checked again.

        ``recorded`` is what the store holds for the conversation. A worktree must still be
        the one recorded (path, ``.git`` file, repository); one whose files are gone is made
        again on the kept branch. In place, the directory must be the task's repository.
        """
        if recorded is not None and not recorded.is_worktree:
            # Resolving two local paths, once per resume: not worth a thread hop.
            if Path(recorded.path).resolve() != _existing_dir(repo).resolve():  # noqa: ASYNC240
                raise WorkspaceTamperedError(
                    f"conversation {conversation_id} edits {recorded.path} in place, but its "
                    f"task names {repo}; refusing to mount either"
                )
            return await self.create(repo, conversation_id, enabled=False)
        project = self._project_of(_existing_dir(repo))
        if project is not None:
            return await self._resume_remote(repo, project, conversation_id, recorded)
        existing = await self.get(conversation_id)
        if existing is None or not (existing.path.exists() or existing.path.is_symlink()):
            return await self.create(repo, conversation_id)
        if recorded is not None and Path(recorded.path) != existing.path:
            raise WorkspaceTamperedError(
                f"conversation {conversation_id}: the store records {recorded.path} but the "
                f"worktree record names {existing.path}; refusing to mount either"
            )
        verify(existing)
        return existing

    async def _resume_remote(
        self, repo: Path, project: str, conversation_id: str, recorded: WorkspaceInfo | None
    ) -> Workspace:
        """Resume a remote project's conversation on this worker, wherever it ran before.

        The remote's newest checkpoint wins: with no worktree here one is made on the
        published branch, and when the remote is ahead of this worker's checkpoints (the
        run went on elsewhere) the worktree is restored to it. The store's path of the
        worktree is another worker's; this worker's host-only record is the one checked.
        """
        assert self.mirrors is not None
        existing = await self.get(conversation_id)
        present = existing is not None and (existing.path.exists() or existing.path.is_symlink())
        base = recorded.base_ref if recorded is not None else None
        local = None
        if present:
            assert existing is not None and existing.common_dir is not None
            verify(existing)
            names = await list_refs(existing.common_dir, refs.checkpoint_prefix(conversation_id))
            numbers = [int(n.rsplit("/", 1)[1]) for n in names if n.rsplit("/", 1)[1].isdigit()]
            local = max(numbers, default=None)
        else:
            await self.mirrors.ensure(project)
        remote = await self.mirrors.fetch_conversation(
            project, conversation_id, base=base, with_branch=not present
        )
        if present:
            assert existing is not None
            ws = existing
        else:
            ws = await self.create(repo, conversation_id, base_ref=base, from_remote=True)
        if remote.landed_after and remote.branch is not None:
            # Landed after its newest checkpoint: the landed commit is the newest state.
            if not present or await self.mirrors.local_tip(project, conversation_id) != (
                remote.branch
            ):
                await CheckpointStore().restore_commit(ws, remote.branch)
                return ws.model_copy(
                    update={
                        "restored_from": f"refs/heads/{refs.branch_name(conversation_id)}",
                        "note": "this worker restored the worktree to the conversation's "
                        f"landed commit {remote.branch} from the project's remote",
                    }
                )
        elif remote.latest is not None and (not present or local is None or remote.latest > local):
            await CheckpointStore().rollback(ws, remote.latest)
            return ws.model_copy(
                update={
                    "restored_from": refs.checkpoint_ref(conversation_id, remote.latest),
                    "note": (
                        f"this worker restored the worktree from checkpoint {remote.latest} "
                        "on the project's remote, the last snapshot another worker published "
                        "(before each file-changing action; native loops also after each that "
                        "finished): "
                        "changes made after it are not in the worktree; check the files before "
                        "relying on them"
                    ),
                }
            )
        return ws

    async def get(self, conversation_id: str, project_name: str | None = None) -> Workspace | None:
        """The conversation's recorded worktree, None if it has none."""
        directory = self.root / refs.check_conversation_id(conversation_id)
        if project_name is not None:
            names = [project_name]
        elif directory.is_dir():
            names = sorted(
                p.name[1 : -len(_METADATA_SUFFIX)]
                for p in directory.iterdir()
                if p.name.startswith(".") and p.name.endswith(_METADATA_SUFFIX)
            )
        else:
            names = []
        for name in names:
            ws = self._load(conversation_id, name)
            if ws is not None:
                return ws.model_copy(update={"note": "reattached to the existing worktree"})
        return None

    def _load(self, conversation_id: str, project_name: str) -> Workspace | None:
        return recorded_workspace(self.path_for(conversation_id, project_name), conversation_id)

    def _write_metadata(self, ws: Workspace) -> None:
        path = self._metadata_file(ws.conversation_id, ws.path.name)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(ws.model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(path)

    async def remove(self, workspace: Workspace, *, delete_branch: bool = False) -> None:
        """Remove the conversation's worktree; its branch (and checkpoints) stay unless asked.

        A workspace run in place is never deleted: it is the user's directory. No git runs
        in the worktree: its files are deleted (symlinks not followed) and git forgets it.
        """
        if not workspace.is_worktree or workspace.common_dir is None:
            return
        common = workspace.common_dir
        forget(workspace)
        async with exclusive(state_dir(common) / "worktrees.lock"):
            shutil.rmtree(workspace.path, ignore_errors=True)
            if workspace.git_dir is not None and workspace.git_dir.parent.name == "worktrees":
                shutil.rmtree(workspace.git_dir, ignore_errors=True)
            await run_git(["worktree", "prune"], common)
            if delete_branch:
                cid = workspace.conversation_id
                names = [f"refs/heads/{refs.branch_name(cid)}", refs.base_ref(cid)]
                names += await list_refs(common, refs.checkpoint_prefix(cid))
                await delete_refs(common, names)
        with contextlib.suppress(OSError):
            self._metadata_file(workspace.conversation_id, workspace.path.name).unlink()
        with contextlib.suppress(OSError):
            workspace.path.parent.rmdir()  # only succeeds when no other project is left

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

    async def _populate(self, ws: Workspace) -> None:
        """Check the files out (what ``git worktree add`` does after registering).

        A big tree's index is split (git writes only the entries that changed, beside a
        shared index of the rest): the landing then brings the changed paths up without
        rewriting every entry (8 MB at 100,000 files). Big: the repository's own index
        holds as many entries as the snapshot index's rule (a header read, no tree walk)."""
        checkout = await open_checkout(ws)
        assert ws.common_dir is not None
        split = index_entries(ws.common_dir / "index") >= BIG_TREE_ENTRIES
        await checkout.run(
            [
                "-c",
                f"checkout.workers={self.checkout_workers}",
                "-c",
                f"core.splitIndex={'true' if split else 'false'}",
                "reset",
                "--hard",
                "--quiet",
                "--no-recurse-submodules",
            ]
        )


def _metadata_file(worktree: Path) -> Path:
    """The host-only record of a worktree: beside it, where the sandbox cannot reach."""
    return worktree.parent / f".{worktree.name}{_METADATA_SUFFIX}"


def recorded_workspace(worktree: Path, conversation_id: str) -> Workspace | None:
    """The host-only record of the worktree at ``worktree`` (a path the store recorded).

    None when there is none (the conversation edits in place, or its worktree was removed);
    a refusal when the record does not describe exactly that worktree.
    """
    path = _metadata_file(worktree)
    try:
        raw = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    ws = Workspace.model_validate_json(raw)
    if (
        ws.conversation_id != conversation_id
        or worktree.parent.name != conversation_id
        or ws.path != worktree
        or not ws.is_worktree
        or ws.git_dir is None
        or ws.common_dir is None
    ):
        raise WorkspaceTamperedError(
            f"the workspace record {path} does not describe {worktree}; refusing to use it"
        )
    return ws


def _in_place(path: Path, conversation_id: str) -> Workspace:
    """The supplied directory, edited in place: no worktree, and no host git ever runs there."""
    return Workspace(
        conversation_id=conversation_id,
        path=path,
        is_worktree=False,
        note=(
            f"WARNING: no worktree: the agent edits {path} in place; no checkpoints, no git "
            "views and no commit (the agent can rewrite anything there, .git included)"
        ),
    )
