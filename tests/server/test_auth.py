"""Auth: the key file, and every route's refusals (401 without a valid key, 403 without a role)."""

from __future__ import annotations

import inspect
import os
import stat
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from synthorg.errors import ConfigError, NotFoundError, UsageError
from synthorg.server import KeyStore, Role
from synthorg.server.state import authenticated, get_state, require

from .conftest import Keys, client_for

PUBLIC = {
    "/health",
    "/ready",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    # Authenticated by the forge's HMAC signature, not an API key (tests/forge: 401 unsigned).
    "/api/forge/{project}/webhook",
}

# The role each protected route needs (read routes: any role).
NEEDS = {
    ("POST", "/api/conversations"): Role.OPERATOR,
    ("DELETE", "/api/conversations/{conversation_id}"): Role.OPERATOR,
    ("POST", "/api/conversations/{conversation_id}/messages"): Role.OPERATOR,
    ("POST", "/api/conversations/{conversation_id}/pause"): Role.OPERATOR,
    ("POST", "/api/conversations/{conversation_id}/interrupt"): Role.OPERATOR,
    ("POST", "/api/conversations/{conversation_id}/resume"): Role.OPERATOR,
    ("POST", "/api/conversations/{conversation_id}/cancel"): Role.OPERATOR,
    ("POST", "/api/conversations/{conversation_id}/checkpoints/{n}/rollback"): Role.OPERATOR,
    ("POST", "/api/conversations/{conversation_id}/confirmation"): Role.APPROVER,
    ("GET", "/api/keys"): Role.ADMIN,
    ("POST", "/api/keys"): Role.ADMIN,
    ("DELETE", "/api/keys/{key_id}"): Role.ADMIN,
}


def api_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path template) of every authenticated REST route."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        if path not in PUBLIC:
            found += [(method.upper(), path) for method in sorted(operations)]
    return found


def concrete(path: str) -> str:
    return path.replace("{conversation_id}", "conv-x").replace("{key_id}", "k1").replace("{n}", "0")


def test_key_file_is_private_hashed_and_revocable(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "k" / "keys.json")
    record, key = store.create("carol", {Role.OPERATOR, Role.APPROVER})
    raw = (tmp_path / "k" / "keys.json").read_text()
    assert key not in raw and key.split("_", 2)[2] not in raw
    assert stat.S_IMODE(os.stat(tmp_path / "k" / "keys.json").st_mode) == 0o600
    principal = store.authenticate(key)
    assert principal is not None and principal.name == "carol"
    assert principal.can(Role.APPROVER) and principal.can(Role.VIEWER)
    assert not principal.can(Role.ADMIN)
    assert store.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert store.authenticate("so_" + record.id + "_" + "x" * 43) is None
    assert store.authenticate("garbage") is None
    # A second store on the same file (the CLI) revokes; the first sees it at once.
    KeyStore(tmp_path / "k" / "keys.json").revoke(record.id)
    assert store.authenticate(key) is None
    assert store.list()[0].revoked_at is not None
    with pytest.raises(NotFoundError):
        store.revoke("nope")
    with pytest.raises(UsageError):
        store.create("dave", set())


def test_corrupt_key_file_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [{"id": 1}]}')
    with pytest.raises(ConfigError, match="synthorg serve keys create"):
        KeyStore(path).authenticate("so_abc_" + "x" * 43)


async def test_every_route_refuses_missing_invalid_and_revoked_keys(
    app: FastAPI, key_store: KeyStore
) -> None:
    record, revoked = key_store.create("gone", {Role.ADMIN})
    key_store.revoke(record.id)
    routes = api_routes(app)
    assert len(routes) >= 18
    for n, key in enumerate((None, "so_nothere_" + "y" * 43, "Basic abc", revoked)):
        for m, (method, path) in enumerate(routes):
            # Each request from its own address: the per-address limit on failed keys
            # (test_key_guessing.py) would otherwise answer 429 from the eleventh on.
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            transport = httpx.ASGITransport(app=app, client=(f"10.9.{n}.{m}", 4000))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://testserver", headers=headers
            ) as client:
                response = await client.request(method, concrete(path), json={})
                assert response.status_code == 401, (method, path, key, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
                assert response.json()["code"] == "unauthorized"


async def test_roles_are_enforced_on_every_route(app: FastAPI, keys: Keys) -> None:
    holders = {
        Role.VIEWER: keys.viewer,
        Role.OPERATOR: keys.operator,
        Role.APPROVER: keys.approver,
        Role.ADMIN: keys.admin,
    }
    for method, path in api_routes(app):
        needed = NEEDS.get((method, path), Role.VIEWER)
        for role, key in holders.items():
            allowed = role in (needed, Role.ADMIN) or needed is Role.VIEWER
            async with client_for(app, key) as client:
                response = await client.request(method, concrete(path), json={})
            if allowed:
                assert response.status_code != 403, (method, path, role)
            else:
                assert response.status_code == 403, (method, path, role, response.text)
                assert role.value not in ("admin",)
                assert "lacks the" in response.json()["detail"]


async def test_health_ready_metrics_need_no_key(app: FastAPI) -> None:
    async with client_for(app, None) as client:
        assert (await client.get("/health")).json() == {"status": "ok"}
        assert (await client.get("/ready")).json() == {"ready": True, "detail": ""}
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert "synthorg_http_requests_total" in metrics.text


async def test_admin_manages_keys_over_rest(app: FastAPI, keys: Keys) -> None:
    async with client_for(app, keys.admin) as admin:
        made = await admin.post("/api/keys", json={"principal": "eve", "roles": ["viewer"]})
        assert made.status_code == 201
        new_key = made.json()["key"]
        listed = (await admin.get("/api/keys")).json()
        assert {k["principal"] for k in listed} >= {"alice", "olga", "abe", "ada", "eve"}
        assert all("sha256" not in k and "key" not in k for k in listed)
        async with client_for(app, new_key) as eve:
            assert (await eve.get("/api/conversations")).status_code == 200
            assert (await eve.post("/api/conversations", json={})).status_code == 403
        revoked = await admin.delete(f"/api/keys/{made.json()['record']['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        async with client_for(app, new_key) as eve:
            assert (await eve.get("/api/conversations")).status_code == 401
        assert (await admin.delete("/api/keys/unknown")).status_code == 404
        bad = await admin.post("/api/keys", json={"principal": "x", "roles": []})
        assert bad.status_code == 422


async def test_bearer_scheme_is_required(app: FastAPI, keys: Keys) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/api/conversations", headers={"Authorization": keys.viewer})
        assert response.status_code == 401
        ok = await client.get(
            "/api/conversations", headers={"Authorization": f"bearer {keys.viewer}"}
        )
        assert ok.status_code == 200


def test_auth_dependencies_need_no_per_request_introspection_or_thread(app: FastAPI) -> None:
    """With any ``dependency_overrides`` entry FastAPI re-inspects every dependency's
    signature on every request, and it runs each plain-function dependency in a worker thread:
    the app (console included) sets no override and the auth dependencies are coroutines."""
    assert app.dependency_overrides == {}
    checks = [getattr(require(role), "dependency", None) for role in Role]
    for call in (get_state, authenticated, *checks):
        assert inspect.iscoroutinefunction(call), call
