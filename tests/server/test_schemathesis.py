"""schemathesis against the OpenAPI schema, in-process: no 5xx, no schema violations."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    positive_data_acceptance,
)

from synthorg.server import KeyStore, Role, ServerSettings, create_app
from synthorg.store.sqlite import SqliteStore

from .helpers import make_repo
from .scripted_service import ScriptedRunService

_ADMIN: dict[str, str] = {}


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The app over a real store, keys and the scripted service, repositories confined to a
    temp dir (so generated paths can never make the server work in '/')."""
    root = tmp_path_factory.mktemp("schemathesis")
    make_repo(root / "repos" / "project", {"README.md": b"hi\n"})
    store = asyncio.run(SqliteStore.open(root / "store.db"))
    keys = KeyStore(root / "keys.json")
    _ADMIN["key"] = keys.create("fuzzer", {Role.ADMIN})[1]
    service = ScriptedRunService(store, root / "home", turns=1, delay=0.0)
    app = create_app(
        ServerSettings(repository_roots=(root / "repos",)),
        store=store,
        run_service=service,
        auth=keys,
    )
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    asyncio.run(store.close())


def test_api_conforms_to_its_schema(api_schema: Any) -> None:
    """Every operation: generated requests (valid and invalid) never get a 5xx or a response
    that violates the schema."""
    headers = {"Authorization": f"Bearer {_ADMIN['key']}"}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20
    checked = 0
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case[Any]) -> None:
            # Kept: no 5xx, status codes, content types and bodies as documented, auth enforced.
            # Left out: schema-valid is not always acceptable (a cursor from nowhere, a
            # repository outside the allowed roots: 400), and unknown query parameters are
            # ignored as HTTP APIs usually do rather than refused.
            case.call_and_validate(
                headers=headers,
                excluded_checks=[positive_data_acceptance, negative_data_rejection],
            )

        try:
            check()
        except Unsatisfiable:
            # No parameters or body to break (e.g. /health): there is no negative input.
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        checked += 1
    assert checked >= 2 * len(operations) - 8


def test_schema_documents_every_route(api_schema: Any) -> None:
    paths = api_schema.raw_schema["paths"]
    assert "/api/conversations/{conversation_id}/confirmation" in paths
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert "200" in operation["responses"] or "201" in operation["responses"], (
                path,
                method,
            )
            if path not in ("/health", "/ready", "/metrics"):
                assert "401" in operation["responses"], (path, method)
