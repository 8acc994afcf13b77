"""Errors of the workspace component (git failures live in ``git.py`` as ``GitError``)."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.errors import NotFoundError, UsageError


class NotAGitWorkspaceError(UsageError):
    """A git-only operation (views, checkpoints) was asked of a workspace that is not git."""


class CheckpointNotFoundError(NotFoundError):
    """The named checkpoint does not exist for that conversation."""


class SecretFileError(UsageError):
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
