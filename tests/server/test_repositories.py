"""Which repositories a client may name (15.1): only under the configured roots or registered
projects, never the data dir (its parents, its children) or a key file; on every path: the
API, resume, and ``synthorg run --repo``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from synthorg.domain import AgentIdentity, ConversationRecord, Task, new_id
from synthorg.server import KeyStore, ServerSettings, create_app
from synthorg.service.boot import Components
from synthorg.store import Store

from .conftest import Keys, client_for
from .helpers import make_repo
from .real_stack import real_stack, stack_settings

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def refused(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["code"] == "forbidden"
    # Nothing of the server's own layout beyond what the caller sent.
    assert "keys.json" not in body["detail"] and "gateway-signing" not in body["detail"]


async def test_the_data_dir_its_parents_and_children_are_refused_even_under_a_root(
    operator: httpx.AsyncClient, home: Path, tmp_path: Path, key_store: KeyStore
) -> None:
    """The roots (the test's temp dir) contain the data dir: it is refused all the same."""
    (home / "keys").mkdir(parents=True, exist_ok=True)
    make_repo(tmp_path / "inside-keys", {"a": b"a"})
    for repository in (
        home,
        home / "keys",
        home / "worktrees",
        home / "server" / ".." / "keys",
        tmp_path,  # a parent of the data dir
        key_store.path.parent,  # the API key file's directory (outside the data dir here)
    ):
        response = await operator.post(
            "/api/conversations",
            json={"repository": str(repository), "prompt": "read the keys", "worktree": False},
        )
        refused(response)
    link = tmp_path / "innocent"
    link.symlink_to(home)
    refused(
        await operator.post(
            "/api/conversations", json={"repository": str(link), "prompt": "x", "start": False}
        )
    )
    listed = (await operator.get("/api/conversations")).json()["items"]
    assert listed == []


async def test_outside_the_roots_is_refused(
    operator: httpx.AsyncClient, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "repo"
    make_repo(elsewhere, {"a": b"a"})
    response = await operator.post(
        "/api/conversations", json={"repository": str(elsewhere), "prompt": "x", "start": False}
    )
    refused(response)
    assert "repository_roots" in response.json()["detail"]


@pytest.fixture
async def default_server(
    tmp_path: Path, key_store: KeyStore, _scripts_importable: None
) -> AsyncIterator[FastAPI]:
    """A server with the default [server] section: no roots, no projects."""
    settings = ServerSettings(keys_file=key_store.path)
    stack = stack_settings(tmp_path / "home")
    async with real_stack(stack, repositories=settings.repository_policy(stack)) as wired:
        app = create_app(settings, store=wired.store, run_service=wired.service, auth=key_store)
        async with app.router.lifespan_context(app):
            yield app


async def test_a_server_allows_no_repository_until_the_operator_says_which(
    default_server: FastAPI, keys: Keys, repo: Path
) -> None:
    async with client_for(default_server, keys.operator) as client:
        response = await client.post(
            "/api/conversations", json={"repository": str(repo), "prompt": "x", "start": False}
        )
    refused(response)
    assert "repository_roots" in response.json()["detail"]


async def test_registered_projects_are_allowed(
    tmp_path: Path, key_store: KeyStore, keys: Keys, repo: Path, _scripts_importable: None
) -> None:
    settings = ServerSettings(keys_file=key_store.path)
    stack = stack_settings(
        tmp_path / "home",
        extra={"mcp": {"projects": [{"project_id": "project", "repository": str(repo)}]}},
    )
    async with real_stack(stack, repositories=settings.repository_policy(stack)) as wired:
        app = create_app(settings, store=wired.store, run_service=wired.service, auth=key_store)
        async with app.router.lifespan_context(app), client_for(app, keys.operator) as client:
            response = await client.post(
                "/api/conversations", json={"repository": str(repo), "prompt": "x", "start": False}
            )
            assert response.status_code == 201, response.text
            other = tmp_path / "other"
            make_repo(other, {"a": b"a"})
            refused(
                await client.post(
                    "/api/conversations",
                    json={"repository": str(other), "prompt": "x", "start": False},
                )
            )


async def test_resume_of_a_conversation_naming_the_data_dir_is_refused(
    operator: httpx.AsyncClient, store: Store, home: Path, components: Components
) -> None:
    """A conversation stored before the rule (or by a laxer server) never runs again."""
    now = components.service._clock()
    record = ConversationRecord(
        id=new_id("conv"),
        task=Task(id=new_id("task"), project_id="p", prompt="x", repository=str(home)),
        agent=AgentIdentity(id="agent-react"),
        loop_type="react",
        model="progress3",
        provider="scripted",
        created_at=now,
        updated_at=now,
        max_turns=5,
    )
    await store.create_conversation(record)
    refused(await operator.post(f"/api/conversations/{record.id}/resume"))
    refused(await operator.post(f"/api/conversations/{record.id}/messages", json={"text": "go"}))
    assert (await operator.get(f"/api/conversations/{record.id}")).json()["runs"] == 0


def test_the_cli_refuses_the_data_dir_but_runs_where_the_user_points(tmp_path: Path) -> None:
    """``synthorg run --repo PATH``: the path a person types is their choice, except the data
    dir (decided in service/repositories.py)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env["SYNTHORG_HOME"] = str(home)
    command = [sys.executable, "-m", "synthorg.cli.app", "run", "read the keys", "--no-worktree"]
    for repository in (home, tmp_path):
        result = subprocess.run(
            [*command, "--repo", str(repository)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode != 0
        assert "data dir" in result.stdout + result.stderr, result.stdout + result.stderr
    assert not any((home / "worktrees").glob("*/*"))


async def test_the_console_offers_only_what_a_run_may_name(
    operator: httpx.AsyncClient, repo: Path, tmp_path: Path, key_store: KeyStore
) -> None:
    """The new-run form's list asks the same rule as creation: the key file's directory,
    made a repository under a root, is neither offered nor accepted."""
    make_repo(key_store.path.parent, {"README": b"keys live here\n"})
    offered = (await operator.get("/console/repositories")).json()["items"]
    assert offered == [str(repo)]
    refused(
        await operator.post(
            "/api/conversations",
            json={"repository": str(key_store.path.parent), "prompt": "x", "start": False},
        )
    )
    for path in offered:
        created = await operator.post(
            "/api/conversations", json={"repository": path, "prompt": "x", "start": False}
        )
        assert created.status_code == 201, created.text
