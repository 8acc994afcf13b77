"""Which repositories a run may work on: the one rule, checked at creation and at every start.

Two parts. The data dir (``SYNTHORG_HOME``: store, API keys, the gateway's signing key,
worktrees) and any other secret file of the server are protected always: a repository that
is one of them, lies inside one or contains one is refused, whoever asks. A run works in its
repository (directly with ``worktree=false``, or in a worktree sharing its objects), so a
repository that contained the signing key would hand the agent the power to mint bearers.

Beyond that, a *remote* caller (the agent server) may only name repositories under the
configured ``[server] repository_roots`` or a project registered in ``[mcp] projects``; with
neither configured every repository is refused. A person at the terminal (``synthorg run
--repo PATH``, ``synthorg demo``) already has the access of the user running SynthOrg, so
the path they type counts as their choice (``roots=None``). So does a person at a terminal
of this host whose ``synthorg run`` hands its run to a running ``synthorg serve`` through the
local operator's socket: the kernel vouches they are the server's own user or root
(``synthorg.localsock``), who could run it in their own process anyway (``for_terminal``).

A task may name a configured remote project instead of a path (``project:NAME``, see
``workspace.remote``): it works on this process's mirror of the project, which the operator
configured, so it is allowed whoever asks; an unconfigured name is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from synthorg.errors import UsageError
from synthorg.workspace.remote import project_name


class RepositoryRefused(UsageError):
    """A repository the policy does not allow; the message says what to configure."""


def _resolved(path: Path | str) -> Path:
    return Path(path).expanduser().resolve()


def _overlaps(path: Path, protected: Path) -> bool:
    return path.is_relative_to(protected) or protected.is_relative_to(path)


@dataclass(frozen=True)
class RepositoryPolicy:
    """The allowed repositories of one process (``check`` is the rule)."""

    home: Path
    """The data dir: it, its parents and its children are never a repository."""
    protected: tuple[Path, ...] = ()
    """Other secret paths of this process (key files outside the data dir)."""
    roots: tuple[Path, ...] | None = None
    """Allowed directories; None: any path the caller names (a person at the terminal)."""
    projects: tuple[Path, ...] = ()
    """Repositories of registered projects (allowed besides the roots)."""
    remote_projects: Mapping[str, Path] = field(default_factory=dict)
    """``project:NAME`` -> this process's mirror of that remote project."""

    @classmethod
    def for_server(
        cls,
        home: Path,
        *,
        roots: Iterable[Path],
        projects: Iterable[Path] = (),
        protected: Iterable[Path] = (),
    ) -> RepositoryPolicy:
        """The policy of a server: only the roots and the registered projects."""
        return cls(
            home=home,
            protected=tuple(protected),
            roots=tuple(roots),
            projects=tuple(projects),
        )

    def for_terminal(self) -> RepositoryPolicy:
        """The same protected paths and mirrors, any other path: a person at this host's
        terminal (the local operator), not a remote caller."""
        return replace(self, roots=None, projects=())

    def protecting(self, paths: Iterable[Path]) -> RepositoryPolicy:
        """The same policy with more protected paths."""
        return replace(self, protected=(*self.protected, *paths))

    def with_remote_projects(self, mirrors: Mapping[str, Path]) -> RepositoryPolicy:
        """The same policy with the mirrors of remote projects."""
        return replace(self, remote_projects={**self.remote_projects, **mirrors})

    def offered(self, limit: int) -> list[Path]:
        """Up to ``limit`` git work trees to offer a caller choosing a repository: each root,
        the directories directly under it, and the registered projects, as far as ``check``
        allows them. None with ``roots=None``: any path goes, so there is nothing to list."""
        if self.roots is None:
            return []
        candidates: list[Path] = []
        for root in map(_resolved, self.roots):
            try:
                children = sorted(p for p in root.iterdir() if p.is_dir())
            except OSError:  # gone or unreadable: it offers nothing
                continue
            candidates += [root, *children]
        candidates += map(_resolved, self.projects)
        found: list[Path] = []
        for path in dict.fromkeys(candidates):
            if len(found) == limit:
                break
            if (path / ".git").exists() and self._allows(path):
                found.append(path)
        return found

    def _allows(self, path: Path) -> bool:
        try:
            self.check(path)
        except RepositoryRefused:
            return False
        return True

    def check(self, repository: Path | str) -> Path:
        """The resolved repository path, or RepositoryRefused saying why."""
        name = project_name(str(repository))
        if name is not None:
            mirror = self.remote_projects.get(name)
            if mirror is None:
                raise RepositoryRefused(
                    f"no project {name!r} with a remote is configured here: the operator "
                    f'adds [projects.{name}] remote = "URL" to every worker\'s config'
                )
            return mirror
        path = _resolved(repository)
        for secret in (self.home, *self.protected):
            if _overlaps(path, _resolved(secret)):
                # Said without the protected path: the caller need not learn where it is.
                raise RepositoryRefused(
                    f"repository {str(repository)!r} overlaps SynthOrg's data dir or key files "
                    "(SYNTHORG_HOME, its parents and its children are never a repository); "
                    "name a project's own directory"
                )
        if self.roots is None:
            return path
        allowed = (*self.roots, *self.projects)
        if not allowed:
            raise RepositoryRefused(
                "this server allows no repositories yet: the operator sets [server] "
                "repository_roots (or registers projects in [mcp] projects) in the config"
            )
        if any(path.is_relative_to(_resolved(root)) for root in allowed):
            return path
        roots = ", ".join(str(root) for root in self.roots) or "(none)"
        raise RepositoryRefused(
            f"repository {str(repository)!r} is outside the allowed roots ({roots}) and the "
            "registered projects; ask the operator to add it to [server] repository_roots"
        )
