"""The tools' scope is a conversation on a project: the MCP server resolves it from a verified
bearer, the control plane states it for its own stages without pretending to hold one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from synthorg.errors import SynthOrgError
from synthorg.gateway.signer import BearerClaims
from synthorg.mcp import McpConfig
from synthorg.mcp.scope import RunScope, resolve_scope


def _config() -> McpConfig:
    return McpConfig.model_validate({"projects": [{"project_id": "web"}]})


def _claims(project: str) -> BearerClaims:
    return BearerClaims(
        execution_id="e-1",
        agent_id="a",
        task_id="t",
        project_id=project,
        conversation_id="c-1",
        provider="p",
        model_id="m",
        issued_at=1,
        expires_at=2,
        token_id="j",
        ledger_id="l",
    )


def test_a_scope_is_a_conversation_on_a_project_with_no_bearer() -> None:
    project = _config().project("web")
    assert project is not None
    scope = RunScope(conversation_id="c-1", project=project)
    assert scope.branch == "synthorg/c-1"
    assert scope.check_branch(None) == "synthorg/c-1"
    scope.check_project("web")
    with pytest.raises(SynthOrgError, match="project 'web'"):
        scope.check_project("other")


def test_the_mcp_server_resolves_the_same_scope_from_a_verified_bearer() -> None:
    config = _config()
    assert resolve_scope(config, _claims("web")) == RunScope(
        conversation_id="c-1", project=config.project("web")
    )
    with pytest.raises(SynthOrgError, match="no credentialed tools"):
        resolve_scope(config, _claims("elsewhere"))


def test_the_control_planes_stages_load_no_bearer_code() -> None:
    """forge.stages acts in the control plane: nothing of the bearer signer is loaded for it."""
    probe = "import sys, synthorg.forge.stages; print('synthorg.gateway.signer' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"
