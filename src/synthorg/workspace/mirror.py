"""A worker's mirrors of remote projects: fetch, publish a conversation's refs, bring them back.

Each project with a ``remote`` gets ``<home>/mirrors/<name>``: a repository whose own work
tree stays empty (worktrees are made from it exactly as from a local repository). Its git dir
is host-only; every git command is told it (``GIT_DIR``), never left to discover it, and runs
with the hardened environment of ``workspace.git`` plus the remote's transport settings. The
remote URL is given on each command line, never stored in the mirror's config.

What a remote serves is checked before it becomes a local ref: only the exact names of the
conversation (``refs/heads/synthorg/<id>``, ``refs/synthorg/base/<id>``,
``refs/synthorg/checkpoints/<id>/<n>``) are fetched, into a quarantine namespace; each must
name a commit, the base must be the one the store recorded, and the branch and every
checkpoint must descend from it. Anything else is refused before the worktree is touched.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.workspace import refs
from synthorg.workspace.errors import RemotePublishError, WorkspaceTamperedError
from synthorg.workspace.git import GitError, run_git, run_git_retrying
from synthorg.workspace.locks import exclusive
from synthorg.workspace.models import Workspace
from synthorg.workspace.remote import ProjectRemote
from synthorg.workspace.repo import delete_refs

_log = get_logger("synthorg.workspace")

INCOMING_REFS = "refs/synthorg/incoming/"
"""Quarantine for refs fetched from a remote, checked before they are installed."""
_MAX_CHECKPOINT = 999_999_999
_PUSH_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class RemoteConversation:
    """What the remote holds for one conversation, checked and installed in the mirror."""

    branch: str | None
    base: str | None
    checkpoints: dict[int, str]
    landed_after: bool = False
    """The branch moved past the newest checkpoint (a landing): its tip is the newest state."""

    @property
    def latest(self) -> int | None:
        """The newest checkpoint number, None without any."""
        return max(self.checkpoints, default=None)


class Mirrors:
    """The mirrors of one worker (one ``SYNTHORG_HOME``), one per configured remote project."""

    def __init__(self, home: Path, projects: Mapping[str, ProjectRemote]) -> None:
        self.home = home.expanduser().absolute()
        self.root = self.home / "mirrors"
        self.projects = dict(projects)

    def path(self, name: str) -> Path:
        """The mirror of project ``name`` (its empty work tree; the git dir is ``.git`` in it)."""
        if name not in self.projects:
            raise KeyError(name)
        return self.root / name

    def prepare(self) -> dict[str, Path]:
        """Make each mirror's directory (filled on first use); project name -> mirror."""
        made = {name: self.path(name) for name in self.projects}
        for path in made.values():
            path.mkdir(parents=True, exist_ok=True)
        return made

    def project_of(self, repo: Path) -> str | None:
        """The project whose mirror ``repo`` is, None for any other repository."""
        if repo.parent == self.root and repo.name in self.projects:
            return repo.name
        return None

    def project_of_workspace(self, ws: Workspace) -> str | None:
        """The project a worktree was made from, judged by its recorded (host-only) dirs."""
        if ws.repo is None or ws.common_dir is None:
            return None
        name = self.project_of(ws.repo)
        if name is None or ws.common_dir != self._git_dir(name):
            return None
        return name

    def _git_dir(self, name: str) -> Path:
        return self.path(name) / ".git"

    async def _git(
        self, name: str, args: Sequence[str], *, remote: bool = False, check: bool = True
    ) -> str:
        project = self.projects[name]
        out = await run_git(
            args,
            self.path(name),
            env={"GIT_DIR": str(self._git_dir(name))},
            overrides=project.transport() if remote else (),
            check=check,
        )
        return out.text

    async def _fetch(self, name: str, specs: Sequence[str]) -> None:
        remote = self.projects[name].remote  # a checked URL: never read as an option
        await self._git(name, ["fetch", *_FETCH, remote, *specs], remote=True)

    async def ensure(self, name: str) -> Path:
        """The mirror with the project's branch fresh from the remote (made on first use)."""
        project = self.projects[name]
        path = self.path(name)
        async with exclusive(self.home / "locks" / f"mirror-{name}.lock"):
            if not (path / ".git").is_dir():
                path.mkdir(parents=True, exist_ok=True)
                await run_git(["init", "--quiet", f"--initial-branch={project.branch}"], path)
            head = f"refs/heads/{project.branch}"
            await self._fetch(name, [f"+{head}:{head}"])
            await self._git(name, ["symbolic-ref", "HEAD", head])
        return path

    async def fetch_conversation(
        self, name: str, conversation_id: str, *, base: str | None, with_branch: bool
    ) -> RemoteConversation:
        """Install the conversation's refs from the remote, checked (see the module doc).

        ``base`` is the commit the store recorded the conversation started from.
        ``with_branch=False`` leaves the local branch alone (a worktree here has it out; the
        remote's tip is still read and checked).
        """
        cid = refs.check_conversation_id(conversation_id)
        project = self.projects[name]
        branch_ref = f"refs/heads/{refs.branch_name(cid)}"
        base_ref = refs.base_ref(cid)
        cp_prefix = refs.checkpoint_prefix(cid)
        patterns = [branch_ref, base_ref, cp_prefix + "*"]
        listing = await self._git(name, ["ls-remote", project.remote, *patterns], remote=True)
        wanted: dict[str, str] = {}  # remote ref -> quarantine ref
        exact = re.compile(re.escape(cp_prefix) + r"(0|[1-9][0-9]{0,8})")
        for line in listing.splitlines():
            _, _, ref = line.partition("\t")
            if ref == branch_ref:
                wanted[ref] = f"{INCOMING_REFS}{cid}/branch"
            elif ref == base_ref:
                wanted[ref] = f"{INCOMING_REFS}{cid}/base"
            elif (found := exact.fullmatch(ref)) and int(found[1]) <= _MAX_CHECKPOINT:
                wanted[ref] = f"{INCOMING_REFS}{cid}/checkpoints/{found[1]}"
            elif ref.startswith(cp_prefix):
                _log.warning("REMOTE_REF_IGNORED", project=name, ref=ref[:200])
        if not wanted:
            return RemoteConversation(branch=None, base=None, checkpoints={})
        async with exclusive(self.home / "locks" / f"mirror-{name}.lock"):
            quarantine = f"{INCOMING_REFS}{cid}/"
            try:
                await self._fetch(name, [f"+{src}:{dst}" for src, dst in wanted.items()])
                fetched = await self._read_refs(name, quarantine)
                state = await self._checked(name, cid, fetched, base)
                await self._install(name, cid, state, with_branch=with_branch)
            finally:
                await self._drop(name, quarantine)
        return state

    async def _read_refs(self, name: str, prefix: str) -> dict[str, str]:
        text = await self._git(name, ["for-each-ref", "--format=%(refname) %(objectname)", prefix])
        pairs = (line.split(" ", 1) for line in text.splitlines())
        return {ref: sha for ref, sha in pairs}

    async def _checked(
        self, name: str, cid: str, fetched: dict[str, str], recorded_base: str | None
    ) -> RemoteConversation:
        quarantine = f"{INCOMING_REFS}{cid}/"
        base = fetched.get(quarantine + "base")
        if recorded_base is not None and base not in (None, recorded_base):
            raise WorkspaceTamperedError(
                f"the remote's base ref of conversation {cid} is {base}, but the store recorded "
                f"{recorded_base}; refusing what the remote serves"
            )
        anchor = recorded_base or base
        branch = fetched.get(quarantine + "branch")
        checkpoints = {
            int(ref.rsplit("/", 1)[1]): sha
            for ref, sha in fetched.items()
            if ref.startswith(quarantine + "checkpoints/")
        }
        for what, sha in [("base", base), ("branch", branch)] + [
            (f"checkpoint {n}", sha) for n, sha in sorted(checkpoints.items())
        ]:
            if sha is None:
                continue
            kind = (await self._git(name, ["cat-file", "-t", sha], check=False)).strip()
            descends = anchor is not None and await self._descends(name, anchor, sha)
            if kind != "commit" or not descends:
                raise WorkspaceTamperedError(
                    f"the remote's {what} of conversation {cid} ({sha}, a {kind or 'missing'}) "
                    "does not descend from the conversation's base; refusing it"
                )
        landed_after = False
        if branch is not None and checkpoints:
            newest = checkpoints[max(checkpoints)]
            parent = (await self._git(name, ["rev-parse", f"{newest}^1"], check=False)).strip()
            landed_after = branch != parent and await self._descends(name, parent, branch)
        return RemoteConversation(
            branch=branch, base=base, checkpoints=checkpoints, landed_after=landed_after
        )

    async def _descends(self, name: str, ancestor: str, sha: str) -> bool:
        out = await run_git(
            ["merge-base", "--is-ancestor", ancestor, sha],
            self.path(name),
            env={"GIT_DIR": str(self._git_dir(name))},
            check=False,
        )
        return out.returncode == 0

    async def _install(
        self, name: str, cid: str, state: RemoteConversation, *, with_branch: bool
    ) -> None:
        lines = [
            f"update {refs.checkpoint_ref(cid, n)} {sha}" for n, sha in state.checkpoints.items()
        ]
        if state.base is not None:
            lines.append(f"update {refs.base_ref(cid)} {state.base}")
        if state.branch is not None and with_branch:
            lines.append(f"update refs/heads/{refs.branch_name(cid)} {state.branch}")
        if lines:
            await run_git_retrying(
                ["update-ref", "--stdin"],
                self.path(name),
                env={"GIT_DIR": str(self._git_dir(name))},
                stdin="".join(line + "\n" for line in lines).encode(),
            )

    async def _drop(self, name: str, prefix: str) -> None:
        names = (await self._git(name, ["for-each-ref", "--format=%(refname)", prefix])).split()
        if names:
            payload = "".join(f"delete {ref}\n" for ref in names).encode()
            await run_git(
                ["update-ref", "--stdin"],
                self.path(name),
                env={"GIT_DIR": str(self._git_dir(name))},
                stdin=payload,
                check=False,
            )

    async def publish(self, ws: Workspace, *, checkpoint: str | None = None) -> bool:
        """Push the conversation's branch and base (and ``checkpoint``) to its project's remote.

        The branch is forced (a rollback moves it back); the base only fast-forwards (it
        never changes); a checkpoint is create-only (a lease expecting no such ref), so two
        workers can never both own number n: the second push fails, unless the remote holds
        exactly this commit (a retried push). False when the workspace is not made from a
        mirror (nothing to publish).
        """
        name = self.project_of_workspace(ws)
        if name is None:
            return False
        cid = refs.check_conversation_id(ws.conversation_id)
        branch = f"refs/heads/{refs.branch_name(cid)}"
        specs = [f"+{branch}:{branch}", f"{refs.base_ref(cid)}:{refs.base_ref(cid)}"]
        args = ["push", "--quiet", "--atomic", "--no-verify"]
        if checkpoint is not None:
            if not checkpoint.startswith(refs.checkpoint_prefix(cid)):
                raise ValueError(f"{checkpoint!r} is not a checkpoint of conversation {cid}")
            specs.append(f"{checkpoint}:{checkpoint}")
            args.append(f"--force-with-lease={checkpoint}:")
        project = self.projects[name]
        for attempt in range(_PUSH_ATTEMPTS):
            try:
                await self._git(name, [*args, project.remote, *specs], remote=True)
                return True
            except GitError as exc:
                if checkpoint is not None and await self._served_as_local(name, checkpoint):
                    return await self.publish(ws)  # ours already: the rest without it
                if "rejected" in exc.stderr or attempt == _PUSH_ATTEMPTS - 1:
                    raise RemotePublishError(
                        f"could not publish conversation {cid} to project {name}'s remote: "
                        f"{exc.stderr[:500]}"
                    ) from exc
                _log.warning("REMOTE_PUSH_RETRY", project=name, error=exc.stderr[:300])
                await asyncio.sleep(0.2 * (attempt + 1))  # a backoff, not a synchronisation
        return True

    async def forget(self, name: str, conversation_id: str, *, delete_branch: bool) -> list[str]:
        """Delete a deleted conversation's refs from the remote and from this mirror.

        Its checkpoints always go (only a resume reads them, and nothing resumes a deleted
        conversation); its branch and base ref only with ``delete_branch``, the rule of a
        local repository's branch (a landed commit is on it). The names deleted remotely.
        """
        cid = refs.check_conversation_id(conversation_id)
        doomed = [refs.checkpoint_prefix(cid) + "*"]
        if delete_branch:
            doomed += [f"refs/heads/{refs.branch_name(cid)}", refs.base_ref(cid)]
        project = self.projects[name]
        await self.ensure(name)
        listing = await self._git(name, ["ls-remote", project.remote, *doomed], remote=True)
        served = [line.partition("\t")[2] for line in listing.splitlines()]
        prefix = refs.checkpoint_prefix(cid)
        served = [ref for ref in served if ref.startswith(prefix) or ref in doomed]
        if served:
            specs = [f":{ref}" for ref in served]
            args = ["push", "--quiet", "--atomic", "--no-verify", project.remote, *specs]
            await self._git(name, args, remote=True)
        await self._drop(name, prefix)
        if delete_branch:
            await delete_refs(self._git_dir(name), doomed[1:])
        _log.info("REMOTE_REFS_DELETED", project=name, conversation_id=cid, refs=len(served))
        return served

    async def local_tip(self, name: str, conversation_id: str) -> str | None:
        """The mirror's tip of the conversation's branch, None without one."""
        branch = f"refs/heads/{refs.branch_name(conversation_id)}"
        out = await self._git(name, ["rev-parse", "-q", "--verify", branch], check=False)
        return out.strip() or None

    async def _served_as_local(self, name: str, ref: str) -> bool:
        """Whether the remote's ``ref`` is the commit the mirror's ``ref`` names."""
        local = await self._git(name, ["rev-parse", "-q", "--verify", ref], check=False)
        served = await self._git(
            name, ["ls-remote", self.projects[name].remote, ref], remote=True, check=False
        )
        return bool(local.strip()) and served.split("\t", 1)[0] == local.strip()

    async def landed(self, name: str, conversation_id: str, sha: str) -> bool:
        """Whether ``sha`` is on the conversation's branch as the remote has it now."""
        cid = refs.check_conversation_id(conversation_id)
        branch = f"refs/heads/{refs.branch_name(cid)}"
        quarantine = f"{INCOMING_REFS}{cid}/landed"
        async with exclusive(self.home / "locks" / f"mirror-{name}.lock"):
            try:
                await self._fetch(name, [f"+{branch}:{quarantine}"])
                return await self._descends(name, sha, quarantine)
            except GitError:
                return False  # no such branch on the remote
            finally:
                await self._drop(name, quarantine)


_FETCH = (
    "--quiet",
    "--no-tags",
    "--no-write-fetch-head",
    "--update-head-ok",
    "--no-recurse-submodules",
    "--no-auto-gc",
)
