"""Server fixtures: a real git repo, real keys, the real stack (LocalRunService over a real
SQLite store, the embedded gateway serving scripted models, bwrap sandboxes, worktrees and the
commit gate), the app in-process and on loopback behind uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from synthorg.server import KeyStore, Role, ServerSettings, create_app
from synthorg.service.boot import Components
from synthorg.service.runs import LocalRunService
from synthorg.store import Store
from tests.support import free_port, hermetic_git

from .helpers import make_repo
from .real_stack import real_stack, stack_settings


@pytest.fixture(autouse=True)
def _hermetic_git(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No global git config; an identity from the environment."""
    hermetic_git(tmp_path_factory, monkeypatch)


@dataclass
class Keys:
    """One key per role, plus a key holding no write role at all."""

    viewer: str
    operator: str
    approver: str
    admin: str


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit."""
    path = tmp_path / "project"
    make_repo(path, {"README.md": b"hello\n", "src/app.py": b"print('hi')\n"})
    return path


@pytest.fixture
def key_store(tmp_path: Path) -> KeyStore:
    """A key file in the test's temp dir."""
    return KeyStore(tmp_path / "keys" / "keys.json")


@pytest.fixture
def keys(key_store: KeyStore) -> Keys:
    """Keys for alice (viewer), olga (operator), abe (approver), ada (admin)."""
    return Keys(
        viewer=key_store.create("alice", {Role.VIEWER})[1],
        operator=key_store.create("olga", {Role.OPERATOR})[1],
        approver=key_store.create("abe", {Role.APPROVER})[1],
        admin=key_store.create("ada", {Role.ADMIN})[1],
    )


@pytest.fixture
def settings(tmp_path: Path, key_store: KeyStore) -> ServerSettings:
    """Server settings for tests: small stream limits so they are reachable; repositories
    allowed under the test's temp dir (the data dir inside it stays refused)."""
    return ServerSettings(
        ws_send_queue=16,
        ws_subscribers_per_conversation=4,
        ws_stall_timeout_s=0.5,
        repository_roots=(tmp_path,),
        keys_file=key_store.path,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The data dir of the stack under test."""
    return tmp_path / "home"


@pytest.fixture
async def components(
    home: Path, settings: ServerSettings, _scripts_importable: None
) -> AsyncIterator[Components]:
    """The real stack, wired as ``synthorg serve`` wires it (its repository policy included)."""
    stack = stack_settings(home)
    async with real_stack(stack, repositories=settings.repository_policy(stack)) as wired:
        yield wired


@pytest.fixture
def store(components: Components) -> Store:
    """The stack's real SQLite store."""
    return components.store


@pytest.fixture
def service(components: Components) -> LocalRunService:
    """The real run service."""
    return components.service


def server_app(
    settings: ServerSettings, store: Store, service: LocalRunService, key_store: KeyStore
) -> FastAPI:
    """The app as ``synthorg serve`` builds it over the real stack (its repository rule too)."""
    return create_app(
        settings,
        store=store,
        run_service=service,
        auth=key_store,
        repositories=service.repositories,
    )


@pytest.fixture
async def app(
    settings: ServerSettings, store: Store, service: LocalRunService, key_store: KeyStore
) -> AsyncIterator[FastAPI]:
    """The app with its lifespan entered."""
    application = server_app(settings, store, service, key_store)
    async with application.router.lifespan_context(application):
        yield application


def client_for(app: FastAPI, key: str | None) -> httpx.AsyncClient:
    """An in-process client authenticated with ``key``."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver", headers=headers
    )


@pytest.fixture
async def operator(app: FastAPI, keys: Keys) -> AsyncIterator[httpx.AsyncClient]:
    """An operator's client."""
    async with client_for(app, keys.operator) as client:
        yield client


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[str]:
    """Run ``app`` under uvicorn on loopback in this event loop; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", ws="websockets-sansio"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


@pytest.fixture
async def live(
    settings: ServerSettings, store: Store, service: LocalRunService, key_store: KeyStore
) -> AsyncIterator[str]:
    """The app served by uvicorn on loopback; yields its base URL."""
    application = server_app(settings, store, service, key_store)
    async with serving(application) as url:
        yield url


@pytest.fixture
def _scripts_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the gateway import ``real_scripts:<name>`` (as a subprocess would, via PYTHONPATH)."""
    here = str(Path(__file__).parent)
    monkeypatch.syspath_prepend(here)
    monkeypatch.setenv("PYTHONPATH", here)
