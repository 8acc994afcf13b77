"""The ``[forge]`` section: per project, the webhook secret's variable, triggers and governance."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from synthorg.domain.ids import ProjectId
from synthorg.domain.risk import ConfirmationPolicy

DEFAULT_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")


class ForgeProject(BaseModel):
    """One project's webhook intake."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    webhook_secret_env: str = Field(
        min_length=1, description="Environment variable holding the webhook secret (server only)."
    )
    repository: str = Field(
        min_length=1, description="The task's repository: a path or project:NAME (a remote)."
    )
    label: str = Field(default="synthorg", min_length=1, description="Label that starts a run.")
    command: str = Field(
        default="/synthorg", min_length=1, description="Comment prefix that starts a run."
    )
    associations: tuple[str, ...] = Field(
        default=DEFAULT_ASSOCIATIONS,
        description="author_association values whose comments may trigger a run.",
    )
    allow_authors: tuple[str, ...] = Field(
        default=(), description="Logins allowed to trigger whatever their association."
    )
    model: str | None = Field(
        default=None, min_length=1, description="Model of triggered runs (None: the default)."
    )
    confirmation_policy: ConfirmationPolicy = Field(
        default=ConfirmationPolicy.NEVER,
        description="When a triggered run's actions wait for a person (the issue says so).",
    )
    budget_usd: Decimal | None = Field(
        default=None, gt=0, description="Cost ceiling of each triggered run (None: the default)."
    )
    daily_cap_usd: Decimal | None = Field(
        default=None,
        gt=0,
        description="Spend across the project's triggered runs per UTC day; past it, refused.",
    )
    max_ci_rounds: int = Field(default=3, ge=0, description="CI-feedback resumes per PR.")
    max_concurrent: int = Field(default=1, ge=1, description="Triggered runs active at once.")

    @field_validator("associations")
    @classmethod
    def _upper(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(v.upper() for v in value)


class ForgeSettings(BaseModel):
    """Every project that accepts forge webhooks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    projects: dict[ProjectId, ForgeProject] = Field(
        default_factory=dict, description="Projects by id; an unknown one answers 404."
    )
    console_url: str | None = Field(
        default=None, description="The console's public URL, linked from PRs and comments."
    )
