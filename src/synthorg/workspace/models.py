"""Typed wire models of the workspace component: workspaces, views, checkpoints, gate results."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain.conversation import WorkspaceInfo


class Workspace(BaseModel):
    """Where a conversation works: a dedicated git worktree, or a directory run in place."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversation_id: str = Field(description="The conversation that owns this workspace.")
    path: Path = Field(description="Directory the agent works in (worktree or supplied dir).")
    repo: Path | None = Field(
        default=None, description="Top level of the source repository; None when not git."
    )
    branch: str | None = Field(
        default=None, description="Branch checked out: synthorg/<conversation-id> in a worktree."
    )
    base_ref: str | None = Field(
        default=None, description="Resolved commit sha the branch started from (views diff to it)."
    )
    base_ref_name: str | None = Field(
        default=None, description="The ref name the base was chosen by (branch name, tag, HEAD)."
    )
    is_worktree: bool = Field(default=False, description="Whether a dedicated worktree is used.")
    note: str = Field(default="", description="Why the workspace is what it is, for operators.")
    git_dir: Path | None = Field(
        default=None, description="The private git dir of this checkout (holds HEAD and index)."
    )
    common_dir: Path | None = Field(
        default=None, description="The repository's shared git dir (objects and refs)."
    )
    repo_identity: str | None = Field(
        default=None,
        description="Device and inode of the shared git dir at creation: a repository deleted "
        "and re-created (or re-cloned) at the same path has another.",
    )
    restored_from: str | None = Field(
        default=None,
        description="The remote ref (checkpoint or landed branch) this resume restored the "
        "worktree to: it moved here from another worker. None: as this worker left it.",
    )

    @property
    def is_git(self) -> bool:
        """Whether git views, checkpoints and the gate can work here."""
        return self.git_dir is not None and self.common_dir is not None

    def info(self) -> WorkspaceInfo:
        """The domain's summary of this workspace, for the conversation record."""
        return WorkspaceInfo(
            path=str(self.path),
            branch=self.branch,
            base_ref=self.base_ref,
            is_worktree=self.is_worktree,
        )


ChangeStatus = Literal["added", "modified", "deleted", "renamed"]


class FileChange(BaseModel):
    """One path that differs between the base ref and the current worktree."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="Path relative to the worktree root (the new path of a rename).")
    old_path: str | None = Field(default=None, description="Previous path, for renames only.")
    status: ChangeStatus = Field(description="added / modified / deleted / renamed.")
    binary: bool = Field(default=False, description="Whether git treats the content as binary.")
    additions: int | None = Field(default=None, description="Lines added; None for binary.")
    deletions: int | None = Field(default=None, description="Lines deleted; None for binary.")


class CommitInfo(BaseModel):
    """A commit on the conversation's branch since the base ref."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha: str = Field(description="Full commit sha.")
    author_name: str = Field(description="Author name.")
    author_email: str = Field(description="Author email.")
    date: datetime = Field(description="Author date, with its timezone.")
    subject: str = Field(description="First line of the message.")


class Checkpoint(BaseModel):
    """A snapshot of the worktree held by a hidden ref."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, description="Checkpoint number n, counting from 0 per conversation.")
    sha: str = Field(description="The snapshot commit (its parent is HEAD at snapshot time).")
    tree: str = Field(description="The tree of the snapshot: the worktree's files.")
    ref: str = Field(description="refs/synthorg/checkpoints/<conversation-id>/<n>.")


class GateSummary(BaseModel):
    """What the commit gate needs to know about the run it lands."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(description="The task that was run.")
    title: str = Field(min_length=1, description="Task title (first line of its prompt).")
    conversation_id: str = Field(description="The conversation that ran it.")
    loop_type: str = Field(description="The execution loop that ran it.")
    turns: int = Field(ge=0, description="Action turns the run took.")
    cost_usd: Decimal = Field(ge=0, description="What the run cost, in USD.")


class GateResult(BaseModel):
    """What the commit gate did."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    committed: bool = Field(description="Whether a commit was made.")
    sha: str | None = Field(default=None, description="The new commit's sha, when committed.")
    branch: str | None = Field(default=None, description="The branch committed on.")
    message: str = Field(default="", description="The commit message (empty when no commit).")
    files: list[str] = Field(default_factory=list, description="Paths the commit changed.")
    diffstat: str = Field(default="", description="git's diffstat of the commit.")
    reason: str = Field(description="Why it committed or did not ('committed', 'no changes', ...).")
