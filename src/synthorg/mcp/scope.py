"""The run's scope: which project, repository and branch a verified bearer may act on."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from synthorg.gateway.signer import BearerClaims
from synthorg.mcp.config import McpConfig, ProjectToolConfig
from synthorg.mcp.errors import ToolRefusedError
from synthorg.mcp.refs import RUN_BRANCH_PREFIX, check_branch_name

BRANCH_PREFIX = RUN_BRANCH_PREFIX


def run_branch(conversation_id: str) -> str:
    """The one branch a conversation's run works on (and may push)."""
    return f"{BRANCH_PREFIX}{conversation_id}"


@dataclass(frozen=True, slots=True)
class RunScope:
    """A verified bearer resolved against the server's project configuration."""

    claims: BearerClaims
    project: ProjectToolConfig

    @property
    def branch(self) -> str:
        """The run's own branch."""
        return run_branch(self.claims.conversation_id)

    def is_protected(self, branch: str) -> bool:
        """Whether ``branch`` matches one of the project's protected branch patterns."""
        return any(fnmatchcase(branch, pattern) for pattern in self.project.protected_branches)

    def check_project(self, requested: str | None) -> None:
        """Refuse acting on a project other than the bearer's."""
        if requested is not None and requested != self.claims.project_id:
            raise ToolRefusedError(
                f"this run's bearer is scoped to project {self.claims.project_id!r}; "
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
    return RunScope(claims=claims, project=project)
