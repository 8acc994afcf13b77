"""The commit gate: a deterministic stage, outside the model, that lands a run's changes."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import PurePosixPath

from synthorg.errors import ConflictError
from synthorg.workspace import own_index, refs
from synthorg.workspace.blobs import new_blobs, oversize_and_cores
from synthorg.workspace.checkout import Checkout
from synthorg.workspace.errors import (
    CoreFileError,
    NestedRepositoryError,
    OversizeFileError,
    SecretFileError,
)
from synthorg.workspace.hostlimits import (
    DEFAULT_MAX_CHANGED_FILES,
    DEFAULT_MAX_FILE_BYTES,
    HostLimits,
)
from synthorg.workspace.locks import in_process_lock
from synthorg.workspace.mirror import Mirrors
from synthorg.workspace.models import FileChange, GateResult, GateSummary, Workspace
from synthorg.workspace.objects import InProcessUnavailable, write_commit
from synthorg.workspace.snapshot import Snapshot, SnapshotIndex, head_sha, open_git
from synthorg.workspace.views import tree_delta

DEFAULT_SECRET_PATTERNS = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    ".netrc",
    ".pgpass",
    "credentials.json",
)
"""File names (or paths, when a pattern has a '/') the gate never commits."""

DEFAULT_ALLOWED_PATTERNS = (".env.example", ".env.sample", ".env.template", "*.pub")
"""Exceptions to the secret patterns: templates and public keys are meant to be shared."""

_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_GITLINK = "160000"  # a nested repository's entry


def _matches(path: str, patterns: Sequence[str]) -> bool:
    name = PurePosixPath(path).name
    return any(
        fnmatch.fnmatchcase(path if "/" in pattern else name, pattern) for pattern in patterns
    )


def commit_message(summary: GateSummary) -> str:
    """The gate's commit message: same summary in, same message out."""
    title = " ".join(summary.title.split())
    if len(title) > 72:
        title = title[:69] + "..."
    return (
        f"{title}\n\n"
        f"Task: {summary.task_id}\n"
        f"Conversation: {summary.conversation_id}\n"
        f"Loop: {summary.loop_type}\n"
        f"Turns: {summary.turns}\n"
        f"Cost: ${summary.cost_usd:.4f}\n"
    )


class CommitGate:
    """Commits a finished run's changes on the conversation's branch, or says why not."""

    def __init__(
        self,
        author_name: str = "SynthOrg",
        author_email: str = "synthorg@localhost",
        *,
        secret_patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS,
        allowed_patterns: Sequence[str] = DEFAULT_ALLOWED_PATTERNS,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_changed_files: int = DEFAULT_MAX_CHANGED_FILES,
        publisher: Mirrors | None = None,
        in_process: bool = True,
        diffstat: bool = True,
    ) -> None:
        self.in_process = in_process
        self.diffstat = diffstat
        """Put git's diffstat of the commit in the result (one more git process per landing;
        the service, which reads only the sha and branch, turns it off)."""
        """Write the commit with libgit2 (False: ``git commit-tree``, the benchmark's baseline)."""
        self.publisher = publisher
        """Pushes a landed branch of a remote project's worktree to the remote."""
        if max_file_bytes < 1:
            raise ValueError("max_file_bytes must be at least 1")
        self.max_file_bytes = max_file_bytes
        self.limits = HostLimits(max_file_bytes, max_changed_files)
        """What a snapshot for this gate hashes at most (the NO_OP check's scan uses it too)."""
        self.secret_patterns = tuple(secret_patterns)
        self.allowed_patterns = tuple(allowed_patterns)
        self._identity = {
            "GIT_AUTHOR_NAME": author_name,
            "GIT_AUTHOR_EMAIL": author_email,
            "GIT_COMMITTER_NAME": author_name,
            "GIT_COMMITTER_EMAIL": author_email,
        }
        self._signature = (author_name, author_email)

    def secret_files(self, paths: Sequence[str]) -> list[str]:
        """Those of ``paths`` the gate would refuse to commit."""
        return [
            p
            for p in paths
            if _matches(p, self.secret_patterns) and not _matches(p, self.allowed_patterns)
        ]

    async def land(
        self, ws: Workspace, summary: GateSummary, *, scanned: Snapshot | None = None
    ) -> GateResult:
        """Commit everything the run left in the worktree (tracked and untracked, not ignored).

        Landing is decided by content: a full scan of the worktree against HEAD, never a
        cached view. ``scanned`` is such a scan taken after the run's sandbox was gone (the
        NO_OP check's, just before): used as it is while HEAD has not moved since, for a
        second scan could only find the same content. Raises a ``GateRefusedError``
        (committing nothing) for a worktree whose ``.git`` or repository changed, secret
        files, core dumps and files over the size limit. A workspace that is not a SynthOrg
        worktree is never committed to.
        """
        if not ws.is_worktree or not ws.is_git:
            return GateResult(
                committed=False,
                branch=ws.branch,
                reason=f"no commit possible: workspace is not a SynthOrg worktree ({ws.note})",
            )
        checkout = await open_git(ws)
        branch = ws.branch or refs.branch_name(ws.conversation_id)
        async with in_process_lock(f"gate:{ws.path}"):
            on = await _head_ref(checkout)
            if on != f"refs/heads/{branch}":
                raise ConflictError(
                    f"worktree {ws.path} is not on branch {branch} (HEAD is "
                    f"{on or 'detached'}): check that branch out and land again"
                )
            if scanned is not None and scanned.head == await head_sha(checkout):
                snap = scanned
            else:
                async with SnapshotIndex(checkout, self.limits).locked() as index:
                    snap = await index.snapshot(full=True)
            if snap.unhashed:  # refused by apparent size, before host git read them
                raise OversizeFileError(snap.unhashed, self.max_file_bytes)
            base = snap.head or _EMPTY_TREE
            changed, entries = await tree_delta(checkout, base, snap.tree)
            # Gitlinks the run added or changed (the base's own submodules are the user's).
            nested = sorted(e.path for e in entries if e.mode == _GITLINK and e.letter != "D")
            if nested:  # an agent's `git init sub` or planted .gitmodules: never a commit
                raise NestedRepositoryError(nested)
            if not changed:
                return GateResult(committed=False, branch=branch, reason="no changes")
            secrets = self.secret_files([c.path for c in changed if c.status != "deleted"])
            if secrets:
                raise SecretFileError(secrets, self.secret_patterns)
            blobs = new_blobs(entries)
            oversize, cores = await oversize_and_cores(checkout, blobs, self.max_file_bytes)
            if cores:
                raise CoreFileError(cores)
            if oversize:
                raise OversizeFileError(oversize, self.max_file_bytes)
            message = commit_message(summary)
            sha = await self._commit(checkout, snap.tree, snap.head, message)
            # Compare-and-swap: if HEAD moved under us, fail rather than drop a commit.
            reflog = f"synthorg gate: {summary.task_id}"
            await checkout.run_retrying(["update-ref", "-m", reflog, "HEAD", sha, snap.head or ""])
            # The index now lags HEAD; make it match (stat data of unchanged files is kept):
            # the scan's own index is that, when it still holds exactly the landed tree; a
            # scan that read only the overlay's changes brings only the changed paths up.
            async with SnapshotIndex(checkout, self.limits).locked() as index:
                adopted = not snap.from_overlay and index.adopt_as_index(snap.tree)
            if snap.from_overlay and await own_index.holds(checkout, base):
                await _reset_paths(checkout, changed)
            elif not adopted:
                await checkout.run_retrying(["reset", "--quiet", "--mixed", "HEAD"])
            stat = ""
            if self.diffstat:
                shown = await checkout.run(
                    ["diff-tree", "--ignore-submodules=all", "-r", "-M", "--stat=100", base, sha]
                )
                stat = shown.text
            if self.publisher is not None:
                await self.publisher.publish(ws)  # landing a remote project's run pushes it
            return GateResult(
                committed=True,
                sha=sha,
                branch=branch,
                message=message,
                files=sorted(c.path for c in changed),
                diffstat=stat,
                reason="committed",
            )

    async def _commit(self, checkout: Checkout, tree: str, head: str | None, message: str) -> str:
        """The landing's commit object (no ref moves yet): in-process, as checkpoints are."""
        if self.in_process:
            try:
                return write_commit(
                    checkout.dirs.common_dir,
                    tree=tree,
                    parents=[head] if head else [],
                    message=message,
                    identity=self._signature,
                )
            except InProcessUnavailable:
                pass  # e.g. an object format libgit2 lacks: git commit-tree below
        parents = ["-p", head] if head else []
        commit = await checkout.run(
            ["commit-tree", "--no-gpg-sign", tree, *parents, "-F", "-"],
            env=self._identity,
            stdin=message.encode(),
        )
        return commit.text.strip()


async def _head_ref(checkout: Checkout) -> str:
    """The ref HEAD names ('' when detached): read from the recorded, host-side git dir."""
    try:
        head = (checkout.dirs.git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        head = ""
    if head.startswith("ref: "):
        return head.removeprefix("ref: ")
    symbolic = await checkout.run(["symbolic-ref", "-q", "HEAD"], check=False)
    return symbolic.text.strip()


async def _reset_paths(checkout: Checkout, changed: Sequence[FileChange]) -> None:
    """The checkout's index entries of the changed paths made HEAD's, the rest left as they
    are (HEAD's too, as only these paths moved): no scan of every file. Their stat data is
    left unset, so git hashes those files once more at its next look."""
    paths = sorted({p for c in changed for p in (c.path, c.old_path) if p is not None})
    await checkout.run_retrying(
        [
            "--literal-pathspecs",
            "reset",
            "--quiet",
            "--no-refresh",
            "HEAD",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ],
        stdin=b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths),
    )
