"""Per-conversation worktrees, read-only git views, checkpoints with rollback, the commit gate."""

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.errors import (
    CheckpointNotFoundError,
    NotAGitWorkspaceError,
    SecretFileError,
)
from synthorg.workspace.gate import CommitGate, commit_message
from synthorg.workspace.git import GitError
from synthorg.workspace.models import (
    Checkpoint,
    CommitInfo,
    FileChange,
    GateResult,
    GateSummary,
    Workspace,
)
from synthorg.workspace.worktrees import WorktreeManager

__all__ = [
    "Checkpoint",
    "CheckpointNotFoundError",
    "CheckpointStore",
    "CommitGate",
    "CommitInfo",
    "FileChange",
    "GateResult",
    "GateSummary",
    "GitError",
    "NotAGitWorkspaceError",
    "SecretFileError",
    "Workspace",
    "WorktreeManager",
    "commit_message",
]
