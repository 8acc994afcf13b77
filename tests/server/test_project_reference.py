"""``project:NAME``: one rule for the name and one reader, whoever reads a repository (the REST
API, the local operator's socket, the ``[projects]`` config, the run service's policy)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from synthorg.domain import Task
from synthorg.server.local import NewRun
from synthorg.server.wire import CreateConversation
from synthorg.service.options import RunOptions
from synthorg.workspace.remote import ProjectsConfig, project_name

GOOD = ("web", "A", "a-b_9", "x" * 64)
BAD = ("", "-web", "_web", "a.b", "a/b", "a b", "x" * 65, "web\n", "../web")
REMOTE = {"remote": "https://example.invalid/r.git"}


def _api_takes(reference: str) -> bool:
    try:
        CreateConversation(repository=reference, prompt="x")
    except ValidationError:
        return False
    return True


def _socket_takes(reference: str) -> bool:
    task = Task(id="t", project_id="p", prompt="x", repository=reference)
    try:
        NewRun(task=task, options=RunOptions())
    except ValidationError:
        return False
    return True


def _config_takes(name: str) -> bool:
    try:
        ProjectsConfig.model_validate({name: REMOTE})
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("name", GOOD)
def test_a_name_the_config_takes_every_client_may_send(name: str) -> None:
    reference = f"project:{name}"
    assert _config_takes(name)
    assert _api_takes(reference) and _socket_takes(reference)
    assert project_name(reference) == name


@pytest.mark.parametrize("name", BAD)
def test_a_name_the_config_refuses_no_client_may_send(name: str) -> None:
    reference = f"project:{name}"
    assert not _config_takes(name)
    assert not _api_takes(reference) and not _socket_takes(reference)


def test_a_path_is_not_a_project_reference() -> None:
    for path in ("/srv/project:web", "/srv/web", "projects:web", "Project:web"):
        assert project_name(path) is None


def test_a_branch_with_a_trailing_newline_is_refused() -> None:
    # `$` in Python's re matches before a final newline: the name and branch rules once let
    # "web\n" and "main\n" through, which no client could name and git would mangle.
    with pytest.raises(ValidationError, match="branch"):
        ProjectsConfig.model_validate({"web": {**REMOTE, "branch": "main\n"}})
