"""Workspace checkpoints: hidden-ref snapshots of a worktree at action boundaries, and rollback."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from synthorg import overlaylog
from synthorg.errors import ConflictError
from synthorg.workspace import refs
from synthorg.workspace.checkout import Checkout
from synthorg.workspace.errors import CheckpointNotFoundError
from synthorg.workspace.git import GitError, GitOutput, run_git
from synthorg.workspace.hostlimits import HostLimits
from synthorg.workspace.locks import exclusive, in_process_lock
from synthorg.workspace.mirror import Mirrors
from synthorg.workspace.models import Checkpoint, Workspace
from synthorg.workspace.objects import (
    InProcessUnavailable,
    RefTaken,
    commit_and_create_ref,
    refs_under,
)
from synthorg.workspace.snapshot import (
    Snapshot,
    SnapshotIndex,
    head_sha,
    open_git,
    require_git,
    state_dir,
)

# Snapshot commits get a fixed identity so they never depend on (or fail for lack of) the
# host's git config; they are bookkeeping, not anyone's work.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "SynthOrg checkpoint",
    "GIT_AUTHOR_EMAIL": "checkpoint@synthorg.invalid",
    "GIT_COMMITTER_NAME": "SynthOrg checkpoint",
    "GIT_COMMITTER_EMAIL": "checkpoint@synthorg.invalid",
}
_SIGNATURE = (_IDENTITY["GIT_AUTHOR_NAME"], _IDENTITY["GIT_AUTHOR_EMAIL"])


class CheckpointStore:
    """Creates, lists and restores checkpoints ``refs/synthorg/checkpoints/<conv>/<n>``.

    A checkpoint is a commit whose tree is the worktree's tracked and untracked (not
    ignored) files and whose parent is HEAD at the time. It is written with plumbing through a
    private index, so the user's index, branch and HEAD are never touched.
    """

    def __init__(
        self,
        *,
        in_process: bool = True,
        publisher: Mirrors | None = None,
        limits: HostLimits | None = None,
    ) -> None:
        self.limits = limits
        """What a checkpoint hashes at most (the gate's: nothing it refuses is hashed)."""
        self.in_process = in_process
        self.publisher = publisher
        """Pushes each checkpoint of a remote project's worktree to the remote as it is made."""
        """Write commits and refs with libgit2 (False: git processes, the benchmark's baseline)."""
        # Next checkpoint number per (repository, conversation); rebuilt from refs on a miss.
        self._next: dict[tuple[str, str], int] = {}

    async def create(self, ws: Workspace, conversation_id: str | None = None) -> Checkpoint:
        """Snapshot ``ws`` now as the conversation's next checkpoint."""
        return await self._create(ws, conversation_id, lambda index: index.snapshot())

    @staticmethod
    def unchanged_below(ws: Workspace) -> tuple[str, Path] | None:
        """(token, mount) of the layer under the run's overlay while the overlay has changed
        nothing (``overlaylog.unchanged_lower``): a checkpoint now is that layer's tree,
        which the run cannot change, so it can be written while the run's next action
        already runs (``create_below``). None otherwise."""
        return overlaylog.unchanged_lower(ws.path)

    async def create_below(
        self, ws: Workspace, below: tuple[str, Path], conversation_id: str | None = None
    ) -> Checkpoint:
        """The conversation's next checkpoint, of the layer under the overlay ``below``
        (from ``unchanged_below``, taken when the overlay was still empty): whatever the run
        wrote since is not in it. Call it while that overlay is mounted."""
        return await self._create(ws, conversation_id, lambda index: index.lower_snapshot(*below))

    async def _create(
        self,
        ws: Workspace,
        conversation_id: str | None,
        take: Callable[[SnapshotIndex], Awaitable[Snapshot]],
    ) -> Checkpoint:
        """The conversation's next checkpoint, of what ``take`` snapshots under the index lock."""
        cid = refs.check_conversation_id(conversation_id or ws.conversation_id)
        checkout = await open_git(ws)
        async with in_process_lock(f"checkpoint:{checkout.dirs.common_dir}:{cid}"):
            async with SnapshotIndex(checkout, self.limits).locked() as index:
                snap = await take(index)
            return await self._record(ws, checkout, cid, snap.tree, snap.head)

    async def _record(
        self, ws: Workspace, checkout: Checkout, cid: str, tree: str, head: str | None
    ) -> Checkpoint:
        """Commit ``tree`` as the conversation's next checkpoint (its number allocated
        create-only, rescanned when another writer took it) and publish it."""
        common = checkout.dirs.common_dir
        key = (f"{common}\0{ws.repo_identity}", cid)
        for _ in range(20):
            n = self._next.get(key)
            if n is None:
                n = await self._scan_next(ws, cid)
            message = f"synthorg checkpoint {n} of conversation {cid}"
            ref = refs.checkpoint_ref(cid, n)
            try:
                async with exclusive(state_dir(common) / "checkpoints" / f"{cid}.lock"):
                    # Every checkpoint writer of this conversation holds this flock
                    # (freed when its process dies; a mirror installs the conversation's
                    # refs only while building its worktree, before any checkpoint), so
                    # a ref lock file found under it was left by a writer killed
                    # mid-write: stale. Left alone, a resumed run never gets checkpoint n.
                    with contextlib.suppress(FileNotFoundError):
                        (common / f"{ref}.lock").unlink()
                    sha = await self._commit(checkout, tree, head, message, ref)
            except RefTaken:
                self._next.pop(key, None)  # someone else took n: rescan
                continue
            self._next[key] = n + 1
            if self.publisher is not None:
                # Before the checkpoint is logged: a logged one is on the remote.
                await self.publisher.publish(ws, checkpoint=ref)
            return Checkpoint(index=n, sha=sha, tree=tree, ref=ref)
        raise ConflictError(f"could not allocate a checkpoint number for conversation {cid}")

    async def prepare(self, ws: Workspace) -> None:
        """Scan ``ws`` into its snapshot index now, committing nothing: the next ``create``
        then brings the index up to date with what changed since (its change journal),
        not with the whole tree. A run calls it as soon as its sandbox is up, so that its
        first checkpoint's whole scan (a second at 100,000 files) runs while the model
        thinks, not after it answered."""
        checkout = await open_git(ws)
        async with SnapshotIndex(checkout, self.limits).locked() as index:
            # Below the overlay only: the checkpoint it serves may be of that layer
            # (``create_below``), and the journal names what was written meanwhile.
            await index.snapshot(lower_only=True)

    async def _commit(
        self, checkout: Checkout, tree: str, head: str | None, message: str, ref: str
    ) -> str:
        """The checkpoint commit and its create-only ref; ``RefTaken`` if ``ref`` is taken."""
        if self.in_process:
            try:
                # In-process (libgit2, see workspace.objects for why it runs nothing): ~1 ms
                # instead of two git processes. Short and local, so not worth a thread hop.
                return commit_and_create_ref(
                    checkout.dirs.common_dir,
                    tree=tree,
                    parent=head,
                    message=message,
                    ref=ref,
                    identity=_SIGNATURE,
                )
            except InProcessUnavailable:
                pass  # e.g. an object format libgit2 lacks: the git processes below
        parents = ["-p", head] if head else []
        out = await checkout.run(
            ["commit-tree", "--no-gpg-sign", tree, *parents, "-m", message], env=_IDENTITY
        )
        sha = out.text.strip()
        try:
            # Empty old value: create only, so two processes never share a number.
            await checkout.run(["update-ref", "-m", message, ref, sha, ""])
        except GitError as exc:
            if "exists" not in exc.stderr and not exc.is_lock_race:
                raise
            raise RefTaken(exc.stderr) from exc
        return sha

    async def list(
        self, ws: Workspace, conversation_id: str | None = None
    ) -> builtins.list[Checkpoint]:
        """The conversation's checkpoints, oldest first."""
        cid = refs.check_conversation_id(conversation_id or ws.conversation_id)
        found: builtins.list[Checkpoint] = []
        for ref, sha, tree in await self._refs_under(ws, refs.checkpoint_prefix(cid)):
            tail = ref.rsplit("/", 1)[1]
            if tail.isdigit():
                found.append(Checkpoint(index=int(tail), sha=sha, tree=tree, ref=ref))
        return sorted(found, key=lambda c: c.index)

    async def _refs_under(self, ws: Workspace, prefix: str) -> builtins.list[builtins.list[str]]:
        """(name, target, tree) of the refs under ``prefix``: read in-process when possible."""
        if self.in_process:
            _, common = require_git(ws)
            try:
                return [[name, sha, tree] for name, sha, tree in refs_under(common, prefix)]
            except InProcessUnavailable:
                pass
        out = await _refs_query(
            ws, ["for-each-ref", "--format=%(refname)%00%(objectname)%00%(tree)", prefix]
        )
        return [line.split("\0") for line in out.text.splitlines()]

    async def get(self, ws: Workspace, n: int, conversation_id: str | None = None) -> Checkpoint:
        """Checkpoint ``n`` of the conversation, or ``CheckpointNotFoundError``."""
        cid = refs.check_conversation_id(conversation_id or ws.conversation_id)
        ref = refs.checkpoint_ref(cid, n)
        lines = [parts for parts in await self._refs_under(ws, ref) if parts[0] == ref and parts[2]]
        if not lines:
            raise CheckpointNotFoundError(
                f"conversation {cid} has no checkpoint {n}; list them to see which exist"
            )
        return Checkpoint(index=n, sha=lines[0][1], tree=lines[0][2], ref=ref)

    async def rollback(self, ws: Workspace, n: int, conversation_id: str | None = None) -> None:
        """Restore the worktree exactly to checkpoint ``n``.

        Files created since are removed, deleted ones come back, edits are undone; ignored
        files are left alone (they were never part of a checkpoint). In a SynthOrg worktree,
        if the branch moved since the checkpoint (the agent committed), it is moved back too
        and the index reset to it. A worktree whose ``.git`` changed is refused untouched.
        """
        cid = refs.check_conversation_id(conversation_id or ws.conversation_id)
        checkout = await open_git(ws)
        cp = await self.get(ws, n, cid)
        parent = await checkout.run(["rev-parse", "-q", "--verify", f"{cp.sha}^1"], check=False)
        await _restore(checkout, cid, parent.text.strip() or None, cp.tree)

    async def restore_commit(self, ws: Workspace, sha: str) -> None:
        """Put the branch and the worktree exactly at commit ``sha`` (a landing made elsewhere):
        the same restore as a rollback, to a commit instead of a checkpoint."""
        cid = refs.check_conversation_id(ws.conversation_id)
        checkout = await open_git(ws)
        tree = await checkout.run(["rev-parse", "--verify", "--end-of-options", f"{sha}^{{tree}}"])
        await _restore(checkout, cid, sha, tree.text.strip())

    async def _scan_next(self, ws: Workspace, cid: str) -> int:
        existing = await self.list(ws, cid)
        return existing[-1].index + 1 if existing else 0


async def _restore(checkout: Checkout, cid: str, head: str | None, tree: str) -> None:
    """The branch at ``head`` (index reset to it) and the worktree's files exactly ``tree``."""
    async with in_process_lock(f"checkpoint:{checkout.dirs.common_dir}:{cid}"):
        if head and await head_sha(checkout) != head:
            await checkout.run_retrying(["reset", "--quiet", "--mixed", head])
        async with SnapshotIndex(checkout).locked() as index:
            await index.restore(tree)


async def _refs_query(ws: Workspace, args: list[str]) -> GitOutput:
    """Read refs from the recorded shared git dir alone (no work tree is involved)."""
    _, common = require_git(ws)
    return await run_git(args, common, env={"GIT_DIR": str(common)})
