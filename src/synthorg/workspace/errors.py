"""Errors of the workspace component (git failures live in ``git.py`` as ``GitError``)."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.errors import ConflictError, NotFoundError, UsageError


class NotAGitWorkspaceError(UsageError):
    """A git-only operation (views, checkpoints) was asked of a workspace that is not git."""


class CheckpointNotFoundError(NotFoundError):
    """The named checkpoint does not exist for that conversation."""


class UnsuitableRepositoryError(UsageError):
    """A worktree was asked of a directory that cannot have one (not git, bare, no commit)."""


class GateRefusedError(ConflictError):
    """The host refused to land (or touch) a run's worktree; ``code`` names the rule."""

    code = "commit_gate_refused"


class WorkspaceTamperedError(GateRefusedError):
    """The worktree (its ``.git`` file, its repository) no longer matches what was recorded."""

    code = "workspace_tampered"


class CoreFileError(GateRefusedError):
    """The commit gate refused a change that contains core dumps."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = sorted(files)
        super().__init__(
            "refusing to commit core dump files: "
            + ", ".join(self.files)
            + ". Nothing was committed. Delete them (they hold process memory, possibly "
            "secrets) and land again."
        )


class OversizeFileError(GateRefusedError):
    """The commit gate refused a change that contains files over its size limit."""

    def __init__(self, files: Sequence[tuple[str, int]], limit: int) -> None:
        self.files = sorted(files)
        self.limit = limit
        listed = ", ".join(f"{path} ({size} bytes)" for path, size in self.files)
        super().__init__(
            f"refusing to commit files over the gate's size limit of {limit} bytes: {listed}. "
            "Nothing was committed. Delete them, add them to .gitignore, or raise "
            "[gate] max_file_bytes if they belong in the repository."
        )


class TooManyFilesError(GateRefusedError):
    """A change adds or modifies more files than the host works on (before any is hashed)."""

    def __init__(self, count: int, limit: int) -> None:
        self.count = count
        self.limit = limit
        super().__init__(
            f"refusing {count} changed files, over the limit of {limit} the host hashes for "
            "one snapshot: nothing of them was added or committed. Delete them, add them to "
            ".gitignore, or raise [gate] max_changed_files if they belong in the repository."
        )


class NestedRepositoryError(GateRefusedError):
    """The commit gate refused a change that contains nested git repositories (gitlinks)."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = sorted(paths)
        super().__init__(
            "refusing to commit nested git repositories (gitlinks): "
            + ", ".join(self.paths)
            + ". Nothing was committed. A run's work lands as files of this repository: "
            "remove the nested .git directories (or their .gitmodules entries) and land again."
        )


class SecretFileError(GateRefusedError):
    """The commit gate refused a change because it contains files matching secret patterns."""

    def __init__(self, files: Sequence[str], patterns: Sequence[str]) -> None:
        self.files = sorted(files)
        self.patterns = list(patterns)
        super().__init__(
            "refusing to commit files that match secret patterns: "
            + ", ".join(self.files)
            + f" (patterns: {', '.join(self.patterns)}). Nothing was committed. Delete them, "
            "add them to .gitignore, or change the gate's secret_patterns if they are not secrets."
        )


class RemotePublishError(GateRefusedError):
    """The project's remote did not take the conversation's refs (unreachable, or it holds
    another commit under a checkpoint's name): a retry elsewhere could not resume from them."""

    code = "remote_publish_failed"
