"""Keys scoped to projects (15, teams sharing a server): a key of project alpha neither sees
nor controls beta's conversations, on any route or the WebSocket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI

from synthorg.server import KeyStore, Role

from .conftest import Keys, client_for, serving
from .helpers import create, make_repo
from .test_auth import api_routes, concrete
from .test_ws import closed_code
from .wsclient import open_stream

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture
def projects(tmp_path: Path) -> tuple[Path, Path]:
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    for path in (alpha, beta):
        make_repo(path, {"README.md": b"hi\n"})
    return alpha, beta


async def test_a_scoped_key_reaches_only_its_projects(
    app: FastAPI, keys: Keys, key_store: KeyStore, projects: tuple[Path, Path]
) -> None:
    alpha, beta = projects
    _, scoped = key_store.create("pat", {Role.OPERATOR, Role.APPROVER}, ["alpha"])
    async with client_for(app, keys.operator) as everyone, client_for(app, scoped) as pat:
        theirs = (await create(everyone, beta))["id"]
        ours = (await create(pat, alpha))["id"]
        listed = (await pat.get("/api/conversations")).json()["items"]
        assert [c["id"] for c in listed] == [ours]
        assert (await pat.get("/api/conversations/count")).json() == {"count": 1}
        assert (await pat.get("/api/conversations", params={"project": "beta"})).status_code == 403
        assert (await everyone.get("/api/conversations/count")).json() == {"count": 2}
        named = await pat.post(
            "/api/conversations", json={"repository": str(beta), "prompt": "x", "start": False}
        )
        assert named.status_code == 403
        # Every conversation route answers 404 for beta's conversation, as for a missing one.
        for method, path in api_routes(app):
            if "{conversation_id}" not in path:
                continue
            body = {"text": "x"} if path.endswith("/messages") else {"accepted": ["act-1"]}
            response = await pat.request(
                method, path.replace("{conversation_id}", theirs).replace("{n}", "0"), json=body
            )
            assert response.status_code == 404, (method, path, response.text)
            assert response.json() == {"detail": f"no conversation {theirs}", "code": "not_found"}
            mine = await pat.request(method, concrete(path), json=body)
            assert mine.status_code == response.status_code  # indistinguishable from absent
        assert (await everyone.get(f"/api/conversations/{theirs}")).json()["runs"] == 0


async def test_a_scoped_admin_cannot_administer_keys(app: FastAPI, key_store: KeyStore) -> None:
    _, scoped_admin = key_store.create("sam", {Role.ADMIN}, ["alpha"])
    async with client_for(app, scoped_admin) as sam:
        made = await sam.post("/api/keys", json={"principal": "x", "roles": ["admin"]})
        assert made.status_code == 403 and "unscoped admin" in made.json()["detail"]
        assert (await sam.get("/api/keys")).status_code == 403


async def test_the_websocket_refuses_another_projects_conversation(
    app: FastAPI, keys: Keys, key_store: KeyStore, projects: tuple[Path, Path]
) -> None:
    _, beta = projects
    _, scoped = key_store.create("pat", {Role.OPERATOR}, ["alpha"])
    async with client_for(app, keys.operator) as everyone:
        theirs = (await create(everyone, beta))["id"]
    async with serving(app) as live:
        ws = await open_stream(live, theirs, scoped)
        assert await closed_code(ws) == 4404
        mine = await open_stream(live, theirs, keys.operator)
        assert json.loads(await mine.recv())["type"] == "subscribed"
        await mine.close()


async def test_admin_makes_scoped_keys_over_rest(app: FastAPI, keys: Keys) -> None:
    async with client_for(app, keys.admin) as admin:
        made = await admin.post(
            "/api/keys", json={"principal": "pat", "roles": ["viewer"], "projects": ["alpha"]}
        )
        assert made.status_code == 201 and made.json()["record"]["projects"] == ["alpha"]
        bad = await admin.post(
            "/api/keys", json={"principal": "pat", "roles": ["viewer"], "projects": ["../x"]}
        )
        assert bad.status_code == 422
