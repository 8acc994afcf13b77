"""schemathesis against the OpenAPI schema of a real server (the real stack on loopback), with
every check on (the pytest equivalent of ``--checks all``): no 5xx, responses as documented,
schema-valid requests accepted and schema-invalid ones refused, 405 + Allow for undocumented
methods, auth enforced. A fixed seed and a CI-sized example budget."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.core.failures import FailureGroup
from schemathesis.generation.modes import GenerationMode

from synthorg.server import KeyStore, Role, ServerSettings, create_app

from .conftest import serving
from .helpers import make_repo
from .real_stack import real_stack, stack_settings

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

HERE = Path(__file__).parent
_ADMIN: dict[str, str] = {}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real stack behind uvicorn, in its own thread and event loop (schemathesis calls it
    synchronously); repositories confined to one temp dir; runs finish at once."""
    root = tmp_path_factory.mktemp("schemathesis")
    make_repo(root / "repos" / "project", {"README.md": b"hi\n"})
    keys = KeyStore(root / "keys.json")
    _ADMIN["key"] = keys.create("fuzzer", {Role.ADMIN})[1]
    started = threading.Event()
    url: list[str] = []
    stop: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
    failure: list[BaseException] = []

    async def main() -> None:
        stack = stack_settings(root / "home", extra={"run": {"model": "done"}})
        # Negative cases send wrong keys by the hundred: the per-address limit on failed keys
        # (test_key_guessing.py) would answer 429 to everything after the tenth.
        settings = ServerSettings(
            repository_roots=(root / "repos",), keys_file=keys.path, signin_max_failures=10**6
        )
        async with real_stack(stack, repositories=settings.repository_policy(stack)) as wired:
            app = create_app(settings, store=wired.store, run_service=wired.service, auth=keys)
            async with serving(app) as base:
                done = asyncio.Event()
                stop.append((asyncio.get_running_loop(), done))
                url.append(base)
                started.set()
                await done.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the test thread
            failure.append(exc)
            started.set()

    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(HERE))
        patch.setenv("PYTHONPATH", str(HERE))
        thread = threading.Thread(target=run, name="schemathesis-server", daemon=True)
        thread.start()
        assert started.wait(300), "the server never started"
        if failure:
            raise failure[0]
        try:
            yield url[0]
        finally:
            loop, done = stop[0]
            loop.call_soon_threadsafe(done.set)
            thread.join(60)
    if failure:
        raise failure[0]


@pytest.fixture(scope="module")
def api_schema(served: str) -> Any:
    return schemathesis.openapi.from_url(f"{served}/openapi.json")


def test_api_conforms_to_its_schema(api_schema: Any) -> None:
    """Every operation, valid and invalid requests: every check passes (none excluded)."""
    headers = {"Authorization": f"Bearer {_ADMIN['key']}"}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20
    checked = 0
    failures: list[str] = []
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(generation_mode=mode))
        @seed(20261130)
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case[Any]) -> None:
            case.call_and_validate(headers=headers, timeout=60)

        try:
            check()
        except Unsatisfiable:
            # No parameters or body to break (e.g. /health): there is no negative input.
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        except FailureGroup as exc:  # reported with the others: every operation is checked
            failures.append(f"{operation.label} {mode.name}: {str(exc)[:1500]}")
            continue
        checked += 1
    assert not failures, "\n\n".join(failures)
    assert checked >= 2 * len(operations) - 8


def test_schema_documents_every_route(api_schema: Any) -> None:
    paths = api_schema.raw_schema["paths"]
    assert "/api/conversations/{conversation_id}/confirmation" in paths
    for path, operations in paths.items():
        for method, operation in operations.items():
            # 202: a forge webhook's delivery is accepted, its work done in the background.
            assert {"200", "201", "202"} & set(operation["responses"]), (path, method)
            if path not in ("/health", "/ready", "/metrics"):
                assert "401" in operation["responses"], (path, method)
