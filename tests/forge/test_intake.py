"""The webhook's answers through the real app on loopback: 401 for a bad or missing signature,
404 for an unknown project, 202 with nothing done for an event of no interest, and a delivery
of interest queued once (a redelivery starts nothing twice, also after a restart)."""

from __future__ import annotations

import json
from pathlib import Path

from synthorg.server import KeyStore, ServerSettings
from synthorg.store.protocol import DeliveryState

from .conftest import Forge, example, forge_app, web_project


async def test_a_bad_or_missing_signature_is_401_and_keeps_nothing(forge: Forge) -> None:
    labeled = example("issues.labeled")
    wrong = await forge.deliver("issues", labeled, delivery="d-wrong", secret="not-the-secret")
    missing = await forge.deliver("issues", labeled, delivery="d-none", signature="")
    sha1 = await forge.deliver("issues", labeled, delivery="d-sha1", signature="sha1=" + "0" * 40)
    assert (wrong.status_code, missing.status_code, sha1.status_code) == (401, 401, 401)
    assert await forge.store.recent_deliveries(10) == []


async def test_the_signature_covers_the_raw_body(forge: Forge) -> None:
    # The same JSON re-serialised (another spacing) is another body: its signature fails.
    labeled = example("issues.labeled")
    from synthorg.forge.signature import sign

    signed_compact = sign(json.dumps(labeled, separators=(",", ":")).encode(), forge.secret)
    answer = await forge.deliver("issues", labeled, signature=signed_compact)
    assert answer.status_code == 401


async def test_an_unknown_project_is_404(forge: Forge) -> None:
    answer = await forge.deliver("issues", example("issues.labeled"), project="nope")
    assert answer.status_code == 404


async def test_an_event_of_no_interest_is_202_with_nothing_done(forge: Forge) -> None:
    ping = await forge.deliver("ping", example("ping"), delivery="d-ping")
    other_label = example("issues.labeled") | {"label": {"name": "wontfix"}}
    unlabeled = await forge.deliver("issues", other_label, delivery="d-other")
    assert (ping.status_code, unlabeled.status_code) == (202, 202)
    assert ping.json()["queued"] is False and unlabeled.json()["queued"] is False
    assert await forge.store.recent_deliveries(10) == []
    assert await forge.store.count_conversations() == 0


async def test_a_labelled_issue_starts_one_run_and_a_redelivery_nothing_more(
    forge: Forge,
) -> None:
    labeled = example("issues.labeled")
    first = await forge.deliver("issues", labeled, delivery="d-1")
    assert first.status_code == 202 and first.json() == {
        "delivery": "d-1",
        "queued": True,
        "duplicate": False,
    }
    again = await forge.deliver("issues", labeled, delivery="d-1")
    assert again.status_code == 202 and again.json()["duplicate"] is True
    settled = await forge.settled("d-1")
    assert settled.state is DeliveryState.STARTED, settled.outcome
    assert settled.conversation_id is not None and settled.issue == 1
    record = await forge.store.get_conversation(settled.conversation_id)
    assert record.task.project_id == "web"
    prompt = record.task.prompt
    # The issue's text reaches the task fenced as untrusted input.
    assert "<untrusted-forge-input>\nIssue #1: Spelling error in the README file" in prompt
    assert prompt.index("untrusted input") < prompt.index("<untrusted-forge-input>\n")
    assert await forge.store.count_conversations() == 1
    assert len(await forge.store.recent_deliveries(10)) == 1


async def test_a_redelivery_after_a_restart_starts_nothing(
    tmp_path: Path,
    home: Path,
    settings: ServerSettings,
    key_store: KeyStore,
    repo: Path,
    _scripts_importable: None,
) -> None:
    labeled = example("issues.labeled")
    project, secret = web_project(repo), "restart-secret-0123456789"
    async with forge_app(home, settings, key_store, project, secret) as served:
        assert (await served.deliver("issues", labeled, delivery="d-r")).status_code == 202
        first = await served.settled("d-r")
        assert first.state is DeliveryState.STARTED
    async with forge_app(home, settings, key_store, project, secret) as restarted:
        again = await restarted.deliver("issues", labeled, delivery="d-r")
        assert again.status_code == 202 and again.json()["duplicate"] is True
        assert await restarted.store.count_conversations() == 1
