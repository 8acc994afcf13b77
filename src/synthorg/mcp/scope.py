"""The run's scope: which project, repository and branch a conversation's tools may act on."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from synthorg.mcp.config import McpConfig, ProjectToolConfig
from synthorg.mcp.errors import ToolRefusedError
from synthorg.mcp.refs import RUN_BRANCH_PREFIX, check_branch_name

if TYPE_CHECKING:  # the control plane builds scopes too, without any bearer code
    from synthorg.gateway.signer import BearerClaims

BRANCH_PREFIX = RUN_BRANCH_PREFIX


def run_branch(conversation_id: str) -> str:
    """The one branch a conversation's run works on (and may push)."""
    return f"{BRANCH_PREFIX}{conversation_id}"


@dataclass(frozen=True, slots=True)
class RunScope:
    """A conversation on a configured project: what every credentialed tool acts within.

    The MCP server resolves it from a verified bearer (``resolve_scope``); the control plane
    states it for its own stages, which no bearer drives.
    """

    conversation_id: str
    project: ProjectToolConfig

    @property
    def branch(self) -> str:
        """The run's own branch."""
        return run_branch(self.conversation_id)

    def is_protected(self, branch: str) -> bool:
        """Whether ``branch`` matches one of the project's protected branch patterns."""
        return any(fnmatchcase(branch, pattern) for pattern in self.project.protected_branches)

    def check_project(self, requested: str | None) -> None:
        """Refuse acting on a project other than the scope's."""
        if requested is not None and requested != self.project.project_id:
            raise ToolRefusedError(
                f"this run is scoped to project {self.project.project_id!r}; "
                f"it cannot act on project {requested!r}"
            )

    def check_branch(self, requested: str | None) -> str:
        """The branch to act on: the run's own; protected or foreign branches are refused."""
        branch = (
            self.branch
            if requested is None
            else check_branch_name(requested.removeprefix("refs/heads/"))
        )
        if self.is_protected(branch):
            raise ToolRefusedError(
                f"branch {branch!r} is protected in project {self.project.project_id!r}; "
                f"this run may only act on its own branch {self.branch!r}"
            )
        if branch != self.branch:
            raise ToolRefusedError(
                f"wrong branch {branch!r}: this run may only act on its own branch {self.branch!r}"
            )
        return branch


def resolve_scope(config: McpConfig, claims: BearerClaims) -> RunScope:
    """The scope of a verified bearer; refused when its project is not served here."""
    project = config.project(claims.project_id)
    if project is None:
        raise ToolRefusedError(
            f"project {claims.project_id!r} has no credentialed tools configured on this MCP "
            "server; ask the operator to add it to the MCP config"
        )
    return RunScope(conversation_id=claims.conversation_id, project=project)
