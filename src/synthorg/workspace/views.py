"""Read-only git views of a workspace: changes, unified diff and commits since the base ref.

Changes and diffs compare the base commit with a snapshot of the worktree taken through
SynthOrg's private index, so untracked files count and the user's index is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from synthorg.workspace.checkout import Checkout
from synthorg.workspace.hostlimits import HostLimits
from synthorg.workspace.models import ChangeStatus, CommitInfo, FileChange, Workspace
from synthorg.workspace.snapshot import Snapshot, head_sha, open_git, snapshot_tree

_STATUS: dict[str, ChangeStatus] = {
    "A": "added",
    "M": "modified",
    "T": "modified",  # type change (file <-> symlink) reads as a modification
    "D": "deleted",
    "R": "renamed",
}

# The empty tree: the base of a repository that had no commit when the run started.
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def _base(ws: Workspace) -> str:
    return ws.base_ref or _EMPTY_TREE


@dataclass(frozen=True, slots=True)
class EntryChange:
    """One changed entry as git's raw diff gives it: what the gate checks of the new side."""

    path: str
    """The new path (the old one, for a deletion)."""
    mode: str
    """The new mode, octal ("160000": a gitlink; "000000": deleted)."""
    sha: str
    """The new object id."""
    letter: str
    """git's status letter: A, M, T, D, R or C."""


def parse_raw_numstat(payload: str) -> list[FileChange]:
    """Parse ``git diff-tree -r -z -M --raw --numstat`` output into file changes."""
    return _parse_raw_numstat(payload)[0]


def _parse_raw_numstat(payload: str) -> tuple[list[FileChange], list[EntryChange]]:
    tokens = payload.split("\0")
    if tokens and tokens[-1] == "":
        tokens.pop()
    raw: list[tuple[str, str, str | None]] = []  # (status letter, path, old path)
    entries: list[EntryChange] = []
    counts: dict[str, tuple[int | None, int | None]] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith(":"):
            fields = token[1:].split()
            letter = fields[-1][0]
            if letter in "RC":
                raw.append((letter, tokens[i + 2], tokens[i + 1]))
                i += 3
            else:
                raw.append((letter, tokens[i + 1], None))
                i += 2
            if len(fields) == 5:
                entries.append(EntryChange(raw[-1][1], fields[1], fields[3], letter))
            continue
        added, deleted, path = token.split("\t", 2)
        if path == "":  # a rename: old and new path follow as their own tokens
            path = tokens[i + 2]
            i += 3
        else:
            i += 1
        counts[path] = (
            None if added == "-" else int(added),
            None if deleted == "-" else int(deleted),
        )
    changes = []
    for letter, path, old in raw:
        added_n, deleted_n = counts.get(path, (None, None))
        binary = path in counts and added_n is None
        changes.append(
            FileChange(
                path=path,
                old_path=old,
                status=_STATUS.get(letter, "modified") if letter != "C" else "added",
                binary=binary,
                additions=added_n,
                deletions=deleted_n,
            )
        )
    return sorted(changes, key=lambda c: c.path), entries


# (repository, base, tree) -> the changes between the two. Both are immutable objects, so
# the answer never goes stale: a run's NO_OP check and its commit gate usually ask the same
# question one after the other, and the second asks no git process.
_CHANGES: dict[tuple[str, str, str], tuple[tuple[FileChange, ...], tuple[EntryChange, ...]]] = {}
_MAX_CHANGES = 256


async def tree_changes(checkout: Checkout, base: str, tree: str) -> list[FileChange]:
    """Every path that differs between the tree-ish ``base`` and ``tree`` (renames found)."""
    return (await tree_delta(checkout, base, tree))[0]


async def tree_delta(
    checkout: Checkout, base: str, tree: str
) -> tuple[list[FileChange], list[EntryChange]]:
    """The changes between ``base`` and ``tree``, and each changed entry's new mode and id.

    One ``git diff-tree``, which skips subtrees of one id: it costs what changed, where a
    libgit2 tree diff walked every entry (48 ms at 100,000 files). Gitlinks are listed
    (``--ignore-submodules=none``, which also keeps git from reading the tree's
    ``.gitmodules``): a nested repository a run made is a change the gate refuses, never
    one hidden from it. No submodule's repository is opened for a raw diff of two trees."""
    key = (f"{checkout.dirs.common_dir}\0{checkout.ws.repo_identity}", base, tree)
    known = _CHANGES.get(key)
    if known is None:
        args = ["diff-tree", "--ignore-submodules=none", "-r", "-z", "-M", "--raw", "--numstat"]
        out = await checkout.run([*args, base, tree])
        found, entries = _parse_raw_numstat(out.text)
        known = (tuple(found), tuple(entries))
        if len(_CHANGES) >= _MAX_CHANGES:
            _CHANGES.clear()
        _CHANGES[key] = known
    return list(known[0]), list(known[1])


async def changes(ws: Workspace) -> list[FileChange]:
    """Every path that differs between the base ref and the worktree (untracked included)."""
    return (await scan_changes(ws))[1]


async def scan_changes(
    ws: Workspace, limits: HostLimits | None = None, *, overlay: bool = False
) -> tuple[Snapshot, list[FileChange]]:
    """The worktree scanned by content, and every path in which it differs from the base ref
    (``limits``: what the scan hashes at most; the gate's, when it lands the scan;
    ``overlay``: a run's overlay was just released, see ``snapshot_tree``)."""
    checkout = await open_git(ws)
    snap = await snapshot_tree(checkout, limits, overlay=overlay)
    return snap, await tree_changes(checkout, _base(ws), snap.tree)


async def diff(ws: Workspace, path: str | None = None) -> str:
    """Unified diff from the base ref to the worktree, whole or for one path."""
    checkout = await open_git(ws)
    snap = await snapshot_tree(checkout)
    # Plumbing with no external diff and no textconv: no driver the attributes name can run.
    args = [
        "diff-tree",
        "--ignore-submodules=all",
        "-r",
        "-p",
        "-M",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
    ]
    args += ["--full-index", _base(ws), snap.tree]
    if path is not None:
        # Literal pathspec: a file named '*.py' means that file, not a glob.
        args = ["--literal-pathspecs", *args, "--", path]
    out = await checkout.run(args)
    return out.text


async def commits(ws: Workspace) -> list[CommitInfo]:
    """Commits reachable from HEAD but not from the base ref, newest first."""
    checkout = await open_git(ws)
    if await head_sha(checkout) is None:
        return []  # an unborn branch has no commits
    revs = ["HEAD", f"^{ws.base_ref}"] if ws.base_ref else ["HEAD"]
    out = await checkout.run(
        ["rev-list", "--no-commit-header", "--format=%H%x00%an%x00%ae%x00%aI%x00%s", *revs]
    )
    result = []
    for line in out.text.splitlines():
        sha, name, email, date, subject = line.split("\0", 4)
        result.append(
            CommitInfo(
                sha=sha,
                author_name=name,
                author_email=email,
                date=datetime.fromisoformat(date),
                subject=subject,
            )
        )
    return result
