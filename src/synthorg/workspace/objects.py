"""Git work done in-process with libgit2 instead of git processes: checkpoint commits and refs,
and reading refs of a source repository.

A checkpoint used to spawn ``git commit-tree`` and ``git update-ref`` (two of its four git
processes, ~2 ms of CPU each on an idle machine, several under load). libgit2 does the same
in-process in well under a millisecond.

Hardening (issue 12's rules hold here too): the repository is opened on the *recorded* shared
git dir as a bare repository, with ``NO_SEARCH`` and without ``FROM_ENV``, so nothing is
discovered from the agent-writable worktree (its ``.git`` file is never read) and no
``GIT_*`` variable redirects it. libgit2 executes nothing named by configuration: it has no
hooks, no filter drivers (clean/smudge/process), no fsmonitor, no pager, editor or credential
helper, and neither of these two operations touches a work tree or attributes. What it does is
write one commit object and one ref under ``refs/synthorg/``. Anything libgit2 cannot open
(an object format or extension it lacks, a directory owned by another user) makes the caller
fall back to the git processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pygit2

# pygit2 is imported by the functions that use it (~0.1 s of CPU): a process that never
# checkpoints or reads refs in-process (`serve` until its first run) does not pay for it.


class RefTaken(Exception):
    """The ref exists already, or another writer holds its lock: pick another number."""


class InProcessUnavailable(Exception):
    """libgit2 cannot work on this repository; use the git processes instead."""


def commit_and_create_ref(
    common_dir: Path,
    *,
    tree: str,
    parent: str | None,
    message: str,
    ref: str,
    identity: tuple[str, str],
) -> str:
    """Write a commit of ``tree`` (on ``parent``) and create ``ref`` for it; its sha.

    ``RefTaken`` when ``ref`` exists (create-only, as ``git update-ref <ref> <sha> ""``) or is
    locked; ``InProcessUnavailable`` when the repository cannot be opened or written by
    libgit2 (nothing was created then, except possibly an unreferenced commit object).
    """
    import pygit2

    repo = _open_bare(common_dir)
    try:  # freed on every way out: a failed commit write held the pack's fd and maps
        # git commit-tree -m ends the message with a newline; keep the commits identical.
        oid = _create_commit(repo, tree, [parent] if parent else [], message + "\n", identity)
        try:
            repo.references.create(ref, oid, force=False)
        except pygit2.AlreadyExistsError as exc:
            raise RefTaken(str(exc)) from exc
        except (pygit2.GitError, OSError) as exc:  # libgit2's OS-class errors are OSError
            if "lock" in str(exc).lower():
                raise RefTaken(str(exc)) from exc
            raise InProcessUnavailable(str(exc)) from exc
    finally:
        repo.free()
    return str(oid)


def write_commit(
    common_dir: Path, *, tree: str, parents: list[str], message: str, identity: tuple[str, str]
) -> str:
    """Write the commit ``git commit-tree <tree> -p <parent>... -F -`` would (``message``
    verbatim, ``identity`` as author and committer, now); its sha. No ref is touched.
    ``InProcessUnavailable`` when libgit2 cannot (the caller runs ``git commit-tree``)."""
    repo = _open_bare(common_dir)
    try:
        return str(_create_commit(repo, tree, parents, message, identity))
    finally:
        repo.free()


def write_index_tree(common_dir: Path, index: Path) -> str:
    """The tree ``GIT_INDEX_FILE=<index> git write-tree`` would write, written in-process.

    Reads only the index file (host-written, in the checkout's git dir) and writes tree
    objects into the recorded shared git dir: no work tree is read. The caller checks first
    that libgit2 can read the index (``index_file.libgit2_readable``); ``InProcessUnavailable``
    when it still cannot (the caller runs ``git write-tree``).
    """
    import pygit2

    repo = _open_bare(common_dir)
    try:
        return str(pygit2.Index(str(index)).write_tree(repo))
    except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
        raise InProcessUnavailable(str(exc)) from exc
    finally:
        repo.free()


def tree_of(common_dir: Path, commit: str) -> str:
    """The tree of ``commit`` (any tree-ish sha), read in-process; ``InProcessUnavailable``
    when libgit2 cannot (an object it does not have, such as git's built-in empty tree)."""
    import pygit2

    repo = _open_bare(common_dir)
    try:
        return str(repo[pygit2.Oid(hex=commit)].peel(pygit2.Tree).id)
    except (pygit2.GitError, KeyError, ValueError, TypeError) as exc:
        raise InProcessUnavailable(str(exc)) from exc
    finally:
        repo.free()


def entries_under(common_dir: Path, tree: str, paths: Iterable[str]) -> list[tuple[int, str, str]]:
    """(mode, sha, path) of every non-tree entry of ``tree`` at or under each of ``paths``
    (none for a path the tree lacks), read in-process from the recorded shared git dir.
    ``InProcessUnavailable`` when libgit2 cannot (a name that is not UTF-8, say)."""
    import pygit2

    repo = _open_bare(common_dir)
    try:
        root = repo[pygit2.Oid(hex=tree)].peel(pygit2.Tree)
        found: list[tuple[int, str, str]] = []
        for path in sorted(set(paths)):
            try:
                entry = root[path]
            except KeyError:
                continue
            _collect(repo, entry, path, found)
        return found
    except (pygit2.GitError, ValueError, TypeError, UnicodeError) as exc:
        raise InProcessUnavailable(str(exc)) from exc
    finally:
        repo.free()


def _collect(
    repo: pygit2.Repository, entry: pygit2.Object, path: str, found: list[tuple[int, str, str]]
) -> None:
    import pygit2

    if not isinstance(entry, pygit2.Tree):
        assert entry.filemode is not None and entry.name is not None
        found.append((int(entry.filemode), str(entry.id), path))
        return
    for child in entry:
        assert child.name is not None
        _collect(repo, child, f"{path}/{child.name}", found)


@dataclass(slots=True)
class _TreeEdit:
    """The edits of one directory: each name dropped (None), set to (sha, mode), or edited
    further down; ``fresh``: the directory's entries in the base are dropped first."""

    fresh: bool = False
    names: dict[str, _TreeEdit | tuple[str, int] | None] = field(default_factory=dict)


def edit_tree(
    common_dir: Path, base: str, drop: Iterable[str], put: Iterable[tuple[int, str, str]]
) -> str:
    """The tree ``base`` with each of ``drop`` (a file, or a directory and all under it)
    removed, then each (mode, sha, path) of ``put`` set, written in-process into the recorded
    shared git dir; what ``git write-tree`` gives for an index of ``base`` edited so (an
    entry in the way of a new one, a file where a directory goes or the reverse, is
    replaced; a directory left empty is no entry). Only the directories on the edited paths
    are read and written. ``InProcessUnavailable`` when libgit2 cannot (a name that is not
    UTF-8, say): the caller asks git."""
    import pygit2

    edits = _TreeEdit()
    for path in sorted(set(drop)):
        _drop(edits, path.split("/"))
    for mode, sha, path in put:
        _put(edits, path.split("/"), (sha, mode))
    repo = _open_bare(common_dir)
    try:
        root = repo[pygit2.Oid(hex=base)].peel(pygit2.Tree)
        written = _write_edited(repo, root, edits)
        return str(written if written is not None else repo.TreeBuilder().write())
    except (pygit2.GitError, KeyError, ValueError, TypeError, UnicodeError) as exc:
        raise InProcessUnavailable(str(exc)) from exc
    finally:
        repo.free()


def _drop(edits: _TreeEdit, parts: list[str]) -> None:
    node = edits
    for part in parts[:-1]:
        below = node.names.get(part, _ABSENT)
        if below is None or isinstance(below, tuple):
            return  # dropped already, with everything under it
        if below is _ABSENT:
            below = node.names[part] = _TreeEdit()
        assert isinstance(below, _TreeEdit)
        node = below
    node.names[parts[-1]] = None


def _put(edits: _TreeEdit, parts: list[str], leaf: tuple[str, int]) -> None:
    node = edits
    for part in parts[:-1]:
        below = node.names.get(part, _ABSENT)
        if not isinstance(below, _TreeEdit):
            # dropped, or a file to be replaced by this directory: it starts empty
            below = node.names[part] = _TreeEdit(fresh=below is not _ABSENT)
        node = below
    node.names[parts[-1]] = leaf


_ABSENT = object()


def _write_edited(
    repo: pygit2.Repository, base: pygit2.Tree | None, edits: _TreeEdit
) -> pygit2.Oid | None:
    """The edited directory's tree (None when it is left empty)."""
    import pygit2
    from pygit2.enums import FileMode

    builder = repo.TreeBuilder() if base is None or edits.fresh else repo.TreeBuilder(base)
    for name, edit in edits.names.items():
        there = builder.get(name)
        if edit is None:
            if there is not None:
                builder.remove(name)
        elif isinstance(edit, tuple):
            builder.insert(name, pygit2.Oid(hex=edit[0]), edit[1])
        else:
            if there is not None and not isinstance(there, pygit2.Tree) and not edit.fresh:
                # A path under a gitlink, file or link that is neither dropped nor replaced
                # (a file written into a submodule's empty dir): git's index would not make
                # this edit, so neither does this; the caller asks git.
                raise InProcessUnavailable(f"an edit under {name!r}, which is no directory")
            below = there if isinstance(there, pygit2.Tree) else None
            written = _write_edited(repo, below, edit)
            if written is not None:
                builder.insert(name, written, FileMode.TREE)
            elif there is not None:
                builder.remove(name)
    return builder.write() if len(builder) else None


def _create_commit(
    repo: pygit2.Repository,
    tree: str,
    parents: list[str],
    message: str,
    identity: tuple[str, str],
) -> pygit2.Oid:
    import pygit2

    try:
        signature = pygit2.Signature(*identity)
        return repo.create_commit(
            None,
            signature,
            signature,
            message,
            pygit2.Oid(hex=tree),
            [pygit2.Oid(hex=p) for p in parents],
        )
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise InProcessUnavailable(str(exc)) from exc


def refs_under(common_dir: Path, prefix: str) -> list[tuple[str, str, str]]:
    """(name, target, tree) of every ref whose name starts with ``prefix``, as
    ``git for-each-ref --format=%(refname)%00%(objectname)%00%(tree) <prefix>`` lists them
    (tree empty when the target is not a commit). Loose and packed refs of the recorded
    shared git dir; a symbolic ref is listed with what it resolves to, a dangling one left out
    (as git does)."""
    import pygit2

    repo = _open_bare(common_dir)
    try:
        found = []
        for ref in repo.references.iterator():
            if not ref.name.startswith(prefix):
                continue
            try:
                oid = ref.resolve().target
            except KeyError:
                continue
            target = repo.get(oid)
            tree = str(target.tree_id) if isinstance(target, pygit2.Commit) else ""
            found.append((ref.name, str(oid), tree))
        return sorted(found)
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise InProcessUnavailable(str(exc)) from exc
    finally:
        repo.free()


UNKNOWN = object()
"""What ``refs_in_process`` returns when libgit2 cannot answer (ask git instead)."""


class RefReader:
    """Ref questions answered from an open repository (and the one write ``set_ref``)."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self._repo = repo

    def commit_of(self, name: str) -> str | None:
        """The commit ``name`` (HEAD or a full ref name) points at, peeled; None if none."""
        import pygit2

        try:
            target = self._repo.revparse_single(name)
            return str(target.peel(pygit2.Commit).id)
        except (KeyError, pygit2.InvalidSpecError):
            return None

    def current_branch(self) -> str | None:
        """The short name of the checked-out branch; None when detached."""
        if self._repo.head_is_detached:
            return None
        head = self._repo.references.get("HEAD")
        if head is None:
            return None
        target = head.target
        if not isinstance(target, str) or not target.startswith("refs/heads/"):
            raise ValueError(f"HEAD names {target!r}: git says how it shortens")
        return target.removeprefix("refs/heads/")

    def has_ref(self, name: str) -> bool:
        """Whether the ref ``name`` exists."""
        return self._repo.references.get(name) is not None

    def create_ref(self, name: str, sha: str) -> bool:
        """Create ``name`` at the commit ``sha``; False when it exists already."""
        import pygit2

        try:
            self._repo.references.create(name, pygit2.Oid(hex=sha), force=False)
        except pygit2.AlreadyExistsError:
            return False
        return True

    def set_ref(self, name: str, sha: str) -> bool:
        """Point ``name`` at the commit ``sha`` (created or moved, as ``git update-ref``)."""
        import pygit2

        self._repo.references.create(name, pygit2.Oid(hex=sha), force=True)
        return True


def probe_in_process(path: Path) -> tuple[Path, Path] | None:
    """(toplevel, git dir) when ``path`` is the top of a repository whose ``.git`` is a
    directory (its own common dir), read by libgit2 as ``git rev-parse --show-toplevel
    --git-dir`` would; None for anything else (a subdirectory, a linked worktree or
    submodule, a bare repository, another owner, an extension libgit2 lacks): ask git."""
    import pygit2
    from pygit2.enums import RepositoryOpenFlag

    top = path.resolve()
    dotgit = top / ".git"
    if not dotgit.is_dir() or dotgit.is_symlink():
        return None
    try:
        repo = pygit2.Repository(str(top), RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, ValueError):
        return None
    try:
        if repo.is_bare or repo.workdir is None:
            return None
        if Path(repo.workdir).resolve() != top or Path(repo.path).resolve() != dotgit:
            return None
        return top, dotgit
    finally:
        repo.free()


def refs_in_process(cwd: Path, question: Callable[[RefReader], object]) -> object:
    """``question`` answered on the repository whose work tree is ``cwd`` (never searched
    upwards), or ``UNKNOWN`` when libgit2 cannot open or read it (e.g. another owner, an
    extension it lacks): the caller then asks git. The same reads ``git -C cwd`` makes, in
    a fraction of a millisecond. Like git here it reads config and refs (and writes the one
    ref ``RefReader.set_ref`` names); it runs nothing the repository configures."""
    import pygit2
    from pygit2.enums import RepositoryOpenFlag

    try:
        repo = pygit2.Repository(str(cwd), RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, ValueError):
        return UNKNOWN
    try:
        return question(RefReader(repo))
    except (pygit2.GitError, ValueError):
        return UNKNOWN
    finally:
        repo.free()


def _open_bare(common_dir: Path) -> pygit2.Repository:
    import pygit2
    from pygit2.enums import RepositoryOpenFlag

    try:
        flags = RepositoryOpenFlag.NO_SEARCH | RepositoryOpenFlag.BARE
        return pygit2.Repository(str(common_dir), flags)
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise InProcessUnavailable(str(exc)) from exc


def object_sizes(common_dir: Path, shas: list[str]) -> dict[str, int]:
    """Each object's size from its header (the content is never inflated whole)."""
    import pygit2

    repo = _open_bare(common_dir)
    try:
        return {sha: repo.odb.read_header(pygit2.Oid(hex=sha))[1] for sha in shas}
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise InProcessUnavailable(str(exc)) from exc
    finally:
        repo.free()
