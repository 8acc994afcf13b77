"""deploy/compose.yaml against the Compose specification's JSON schema; the Containerfile's
promises (base argument, non-root user, data volume, health check, stop signal).

The compose file is not run end to end here (no container engine on these machines); the
image is built and run by tests/packaging/test_image.py.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.packaging.conftest import REPO

pytestmark = pytest.mark.packaging

DEPLOY = REPO / "deploy"
SCHEMA = Path(__file__).parent / "compose_spec" / "compose-spec.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    assert "draft-07" in schema["$schema"]  # its $schema lacks the trailing '#' lookup needs
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def test_compose_file_is_valid_against_the_compose_spec(
    validator: jsonschema.protocols.Validator, compose: dict[str, Any]
) -> None:
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


@pytest.mark.parametrize(
    "mutation",
    [
        lambda c: c["services"]["server"].__setitem__("restart_policy", "always"),
        lambda c: c["services"]["server"].__setitem__("ports", "8420"),
        lambda c: c.__setitem__("servces", {}),
    ],
    ids=["unknown-service-key", "ports-not-a-list", "unknown-top-level-key"],
)
def test_the_schema_check_rejects_a_broken_compose_file(
    validator: jsonschema.protocols.Validator, compose: dict[str, Any], mutation: Any
) -> None:
    broken = copy.deepcopy(compose)
    mutation(broken)
    assert list(validator.iter_errors(broken))


def test_compose_has_postgres_temporal_a_server_and_two_workers(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "temporal", "server", "worker-1", "worker-2"} <= set(services)
    for name in ("server", "worker-1", "worker-2"):
        service = services[name]
        assert service["build"]["dockerfile"] == "deploy/Containerfile"
        assert service["env_file"][0]["path"] == "./synthorg.env"  # secrets from env files
        assert any(v.endswith(":/var/lib/synthorg") for v in service["volumes"])
        assert service["stop_grace_period"]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        # The options the image's bubblewrap sandbox needs to nest, and no more.
        assert {"seccomp=unconfined", "systempaths=unconfined"} <= set(service["security_opt"])
        assert not service.get("privileged") and not service.get("cap_add")
        assert service["environment"]["SYNTHORG__DISTRIBUTED__ADDRESS"] == "temporal:7233"
    assert services["worker-1"]["command"] == ["worker"]
    assert set(compose["volumes"]) >= {"pgdata", "server-home", "worker-1-home", "worker-2-home"}


def test_compose_and_env_examples_carry_no_secret_values() -> None:
    for name in ("synthorg.env.example", "postgres.env.example"):
        for line in (DEPLOY / name).read_text().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                assert value == "", f"{name}: {key} has a value"
    text = (DEPLOY / "compose.yaml").read_text()
    assert not re.search(r"postgresql://[^@\s]*:[^@\s]*@", text)  # no password in a URL
    ignored = (DEPLOY / ".gitignore").read_text().split()
    assert {"synthorg.env", "postgres.env", "secrets/"} <= set(ignored)


def test_containerfile_declares_base_arg_user_volume_health_and_signal() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    assert "ARG BASE=python:3.12-slim-bookworm" in text
    assert re.search(r"^FROM \$\{BASE\}$", text, re.M)
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert 'VOLUME ["/var/lib/synthorg"]' in text
    assert "SYNTHORG_HOME=/var/lib/synthorg" in text
    assert re.search(r"^HEALTHCHECK .*\n.*/ready", text, re.M)
    assert "STOPSIGNAL SIGTERM" in text


def test_the_compose_settings_load_and_put_the_server_on_temporal(compose: dict[str, Any]) -> None:
    """The overrides compose sets are real settings (a typo would only fail in a container)."""
    from synthorg.distributed.config import distributed_config
    from synthorg.settings import load_settings

    for name in ("server", "worker-1", "worker-2"):
        environment = compose["services"][name]["environment"].items()
        env = {k: v for k, v in environment if not k.endswith("_FILE")}  # a path in the image
        settings = load_settings(None, env=env)
        assert distributed_config(settings).engine == "temporal"
        assert distributed_config(settings).address == "temporal:7233"


def test_workers_have_a_health_check_of_their_own(compose: dict[str, Any]) -> None:
    """`synthorg worker` serves no HTTP: the image's /ready probe would call it unhealthy."""
    for name in ("worker-1", "worker-2"):
        test = compose["services"][name]["healthcheck"]["test"]
        assert test[:4] == ["CMD", "synthorg", "worker", "--health"], test
        assert "8420" not in " ".join(test)


def test_the_build_context_leaves_out_secrets_and_local_state() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", "deploy/secrets", "deploy/*.env"} <= ignored
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (DEPLOY / "Containerfile").read_text(), re.M)
    for sources in copied:  # nothing the image needs is left out
        assert not set(sources.split()) & ignored, sources
