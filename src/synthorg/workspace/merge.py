"""Merging children's commits into a parent's worktree: by the host, in a fixed order, all or none.

The merge never touches a worktree until it is known to be clean: each child's commit is merged
in memory (``git merge-tree --write-tree``, no work tree, no index) on top of a snapshot of the
parent's worktree as it is now; only when every merge is clean is the parent's worktree set to
the result, through the same private index the checkpoints use. A conflict leaves the parent
worktree exactly as it was and names the files and both sides.

Git runs against the repository's shared git dir alone (``GIT_DIR``, no work tree): attributes
come only from the host-owned ``info/attributes`` (``core.attributesFile`` is /dev/null), never
from an agent-written ``.gitattributes``, and hooks are off as in every host git call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.git import GitOutput, is_object_id, run_git
from synthorg.workspace.models import Workspace
from synthorg.workspace.snapshot import SnapshotIndex, open_git, require_git

_IDENTITY = {
    "GIT_AUTHOR_NAME": "SynthOrg delegation",
    "GIT_AUTHOR_EMAIL": "delegation@synthorg.invalid",
    "GIT_COMMITTER_NAME": "SynthOrg delegation",
    "GIT_COMMITTER_EMAIL": "delegation@synthorg.invalid",
}
_MAX_SIDE = 1200
"""Characters of each side of a conflict shown to the model per file."""
_MAX_FILES = 20


@dataclass(frozen=True)
class ChildCommit:
    """A child's landed commit, to merge under ``label`` (its conversation id)."""

    label: str
    sha: str


@dataclass(frozen=True)
class Conflict:
    """One conflicting file: what the parent side and the child's side hold there."""

    path: str
    ours: str
    theirs: str


@dataclass(frozen=True)
class MergeOutcome:
    """What merging did: the children merged (in order), or the conflict that stopped it."""

    merged: tuple[str, ...]
    conflict_with: str | None = None
    conflicts: tuple[Conflict, ...] = ()
    tree: str | None = None

    @property
    def clean(self) -> bool:
        """Whether every child merged (and the parent's worktree now holds the result)."""
        return self.conflict_with is None


async def merge_children(
    ws: Workspace, children: Sequence[ChildCommit], checkpoints: CheckpointStore
) -> MergeOutcome:
    """Merge ``children`` in order into ``ws``'s worktree; on a conflict change nothing."""
    _, common = require_git(ws)
    for child in children:
        if not is_object_id(child.sha):
            raise ValueError(f"not a commit sha: {child.sha!r}")
    if not children:
        return MergeOutcome(merged=())

    git = _Repo(common)

    # The parent's worktree as it is now (a checkpoint: also the point to roll back to).
    start = await checkpoints.create(ws)
    current = start.sha
    tree = start.tree
    merged: list[str] = []
    for child in children:
        out = await git.run(
            ["merge-tree", "--write-tree", "--name-only", "--no-messages", current, child.sha],
            check=False,
        )
        lines = out.text.splitlines()
        if out.returncode not in (0, 1) or not lines:
            raise RuntimeError(f"git merge-tree failed (exit {out.returncode}): {out.stderr}")
        tree = lines[0].strip()
        if out.returncode == 1:
            paths = sorted({p for p in lines[1:] if p})[:_MAX_FILES]
            conflicts = [await git.sides(tree, current, child.sha, p) for p in paths]
            return MergeOutcome(
                merged=tuple(merged), conflict_with=child.label, conflicts=tuple(conflicts)
            )
        commit = await git.run(
            [
                "commit-tree",
                "--no-gpg-sign",
                tree,
                "-p",
                current,
                "-p",
                child.sha,
                "-m",
                f"synthorg: merge delegated {child.label}",
            ],
            env=_IDENTITY,
        )
        current = commit.text.strip()
        merged.append(child.label)
    checkout = await open_git(ws)
    async with SnapshotIndex(checkout).locked() as index:
        await index.restore(tree)
    return MergeOutcome(merged=tuple(merged), tree=tree)


class _Repo:
    """Host git on the shared git dir alone (no work tree, no index)."""

    def __init__(self, common: Path) -> None:
        self.common = common

    async def run(
        self, args: list[str], *, check: bool = True, env: dict[str, str] | None = None
    ) -> GitOutput:
        return await run_git(
            args, self.common, check=check, env={"GIT_DIR": str(self.common), **(env or {})}
        )

    async def blob(self, commit: str, path: str) -> str | None:
        out = await self.run(["cat-file", "-p", f"{commit}:{path}"], check=False)
        return out.text if out.returncode == 0 else None

    async def sides(self, merged_tree: str, ours: str, theirs: str, path: str) -> Conflict:
        """Both sides of the conflicting hunks (from the conflict markers git wrote), or of
        the whole file when git wrote none (modify/delete, binary)."""
        marked = await self.blob(merged_tree, path)
        if marked is not None and "<<<<<<< " in marked:
            ours_parts, theirs_parts, side = [], [], ""
            for line in marked.splitlines():
                if line.startswith("<<<<<<< "):
                    side = "ours"
                elif line.startswith("=======") and side == "ours":
                    side = "theirs"
                elif line.startswith(">>>>>>> ") and side == "theirs":
                    side = ""
                elif side == "ours":
                    ours_parts.append(line)
                elif side == "theirs":
                    theirs_parts.append(line)
            return Conflict(path, _cap("\n".join(ours_parts)), _cap("\n".join(theirs_parts)))
        return Conflict(
            path,
            _cap(await self.blob(ours, path) or "(absent)"),
            _cap(await self.blob(theirs, path) or "(absent)"),
        )


def _cap(text: str) -> str:
    return text if len(text) <= _MAX_SIDE else text[:_MAX_SIDE] + "\n[... truncated]"
