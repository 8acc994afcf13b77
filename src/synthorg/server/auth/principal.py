"""Principals and roles: who a caller is and what each role may do."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Role(StrEnum):
    """What a key may do. Every role may read; admin may do everything."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    ADMIN = "admin"


class Principal(BaseModel):
    """An authenticated caller: the name recorded in decisions and control events."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="Who this is (a person or a service).")
    roles: frozenset[Role] = Field(description="Roles granted to the caller's key.")
    key_id: str = Field(description="The id of the API key that authenticated the caller.")
    projects: frozenset[str] | None = Field(
        default=None, description="Projects the key is scoped to; None: every project."
    )

    def can(self, role: Role) -> bool:
        """Whether the caller holds ``role`` (admin holds all; everyone may read)."""
        return role is Role.VIEWER or role in self.roles or Role.ADMIN in self.roles

    def sees(self, project_id: str) -> bool:
        """Whether the caller's key reaches conversations of ``project_id``."""
        return self.projects is None or project_id in self.projects
