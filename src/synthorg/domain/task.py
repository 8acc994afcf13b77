"""What is asked of an agent: the task and the identity that works on it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain.ids import AgentId, ProjectId, TaskId


class Complexity(StrEnum):
    """How hard a task is judged to be; drives loop selection."""

    TRIVIAL = "trivial"
    SIMPLE = "simple"
    MODERATE = "moderate"
    COMPLEX = "complex"


class Task(BaseModel):
    """A unit of work against a repository."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: TaskId = Field(description="Stable task id; the conversation id derives from it.")
    project_id: ProjectId = Field(description="The project the task belongs to.")
    prompt: str = Field(min_length=1, description="The instruction given to the agent.")
    complexity: Complexity = Field(
        default=Complexity.MODERATE, description="Judged difficulty, used by loop selection."
    )
    artifacts_expected: bool = Field(
        default=True,
        description=(
            "Whether the task must change the workspace: a completed run whose worktree content "
            "is unchanged against its base is NO_OP."
        ),
    )
    repository: str = Field(description="Path of the git repository (or plain directory).")

    @property
    def title(self) -> str:
        """First line of the prompt, shortened for commit messages and listings."""
        first = self.prompt.strip().splitlines()[0]
        return first if len(first) <= 72 else first[:69] + "..."


class AgentIdentity(BaseModel):
    """Who runs a task: the agent id and its role."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: AgentId = Field(description="Stable agent id, bound into the run's bearer.")
    name: str = Field(default="synthorg-agent", description="Human-readable agent name.")
    role: str = Field(default="coder", description="The agent's role in the organisation.")
