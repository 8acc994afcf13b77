"""The local socket holds a request to the public API's rules for the same operation (body cap,
repository form, message sizes, decisions, event cursors): "The server's own rules apply as
to any other client" (server/local.py), against a real `synthorg serve` subprocess."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.localsock import serve_socket
from synthorg.server.wire import MESSAGE_MAX_CHARS
from synthorg.service.demo import create_demo_repo
from tests.cli.serving import serving

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

BODY_CAP = 512 * 1024  # over a longest message (REST: 200000 characters)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    """A serve whose roots hold a demo repository; a client on its local socket."""
    root = tmp_path_factory.mktemp("local-rules")
    home = root / "home"
    repo = create_demo_repo(root / "calc")
    config = root / "synthorg.toml"
    config.write_text(
        '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\nmodels = ["m"]\n'
        'script = "tests.service.scripts:progress_five"\n'
        '[run]\nmodel = "m"\nshutdown_grace_s = 0.5\n'
        f"[server]\nrepository_roots = [{json.dumps(str(root))}]\n"
        f"max_body_bytes = {BODY_CAP}\n"
    )
    transport = httpx.HTTPTransport(uds=str(serve_socket(home)))
    with (
        serving(home, config),
        httpx.Client(transport=transport, base_url="http://serve", timeout=60) as client,
    ):
        yield client, repo


def _new_run(repo: Path | str, *, prompt: str = "write five lines", **options: Any) -> Any:
    task = {"id": "task-1", "project_id": "calc", "prompt": prompt, "repository": str(repo)}
    return {"task": task, "options": options}


def _create(client: httpx.Client, repo: Path, **options: Any) -> str:
    reply = client.post("/v1/conversations", json=_new_run(repo, **options))
    assert reply.status_code == 200, reply.text
    return str(reply.json()["id"])


def test_a_body_over_the_servers_cap_is_refused(served: tuple[httpx.Client, Path]) -> None:
    client, repo = served
    reply = client.post("/v1/conversations", json=_new_run(repo, prompt="x" * (2 * BODY_CAP)))
    assert reply.status_code == 413, reply.text  # as POST /api/conversations answers


@pytest.mark.parametrize("repository", ["calc", "/tmp/with\x00nul", ""])
def test_a_repository_the_api_would_not_accept_is_refused(
    served: tuple[httpx.Client, Path], repository: str
) -> None:
    """REST takes an absolute path or project:NAME (no NUL); a relative one would be resolved
    against the serve's working directory, not the client's."""
    client, _ = served
    reply = client.post("/v1/conversations", json=_new_run(repository))
    assert reply.status_code == 422, reply.text


@pytest.mark.parametrize("size", [0, MESSAGE_MAX_CHARS + 1])
def test_a_start_message_outside_the_apis_bounds_is_refused(
    served: tuple[httpx.Client, Path], size: int
) -> None:
    client, repo = served
    conversation = _create(client, repo)
    reply = client.post(f"/v1/conversations/{conversation}/start", json={"message": "m" * size})
    assert reply.status_code == 422, reply.text
    assert client.get(f"/v1/conversations/{conversation}").json()["runs"] == 0


@pytest.mark.parametrize("after", [-1, 2**70])
def test_an_event_cursor_outside_the_apis_bounds_is_refused(
    served: tuple[httpx.Client, Path], after: int
) -> None:
    client, repo = served
    conversation = _create(client, repo)
    reply = client.get(f"/v1/conversations/{conversation}/events", params={"after": after})
    assert reply.status_code == 422, reply.text


def _pending(client: httpx.Client, conversation: str) -> list[str]:
    """The pending action ids, once the conversation is recorded as waiting for them (the
    request is logged before the status moves: asserting on the record needs both)."""
    ids: list[str] | None = None
    with client.stream("GET", f"/v1/conversations/{conversation}/events") as events:
        for line in events.iter_lines():
            event = json.loads(line)["event"]
            if event["kind"] == "confirmation_request":
                ids = [action["action_id"] for action in event["pending"]]
            elif (
                ids is not None
                and event["kind"] == "status_change"
                and event["new"] == "waiting_confirmation"
            ):
                return ids
    raise AssertionError("the stream ended before the run waited for a confirmation")


def test_a_decision_the_api_would_refuse_is_refused_and_the_run_goes_on(
    served: tuple[httpx.Client, Path],
) -> None:
    """REST refuses an id both accepted and rejected (400), a reason over 4000 characters and
    ids that are not ids (422); the local socket must not hand such a decision to the run."""
    client, repo = served
    conversation = _create(client, repo, confirmation_policy="always")
    assert client.post(f"/v1/conversations/{conversation}/start", json={}).status_code == 204
    ids = _pending(client, conversation)
    url = f"/v1/conversations/{conversation}/decide"
    both = {"accepted": ids, "rejected": ids, "approver": "cli-user"}
    assert client.post(url, json=both).status_code == 400, "accepted and rejected at once"
    long = {"accepted": ids, "rejected": [], "approver": "cli-user", "reason": "r" * 4001}
    assert client.post(url, json=long).status_code == 422, "a reason over REST's 4000"
    odd = {"accepted": [*ids, "not an id"], "rejected": [], "approver": "cli-user"}
    assert client.post(url, json=odd).status_code == 422, "not an id"
    # "A stale or mismatched decision is refused" (ARCHITECTURE.md): an id not pending here.
    stale = {"accepted": [*ids, "call_0123456789abcdef"], "rejected": [], "approver": "cli-user"}
    assert client.post(url, json=stale).status_code == 409, "an id not pending"
    # Still waiting for a decision: none of those reached it.
    record = client.get(f"/v1/conversations/{conversation}").json()
    assert record["status"] == "waiting_confirmation", record
    cancel = client.post(f"/v1/conversations/{conversation}/cancel", json={"by": "test"})
    assert cancel.status_code == 204, cancel.text
