"""Every refusal of the gateway, over real HTTP, in OpenAI's error shape."""

from __future__ import annotations

import base64
import json
import time
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from synthorg.gateway.signer import GatewaySigner, load_or_create_key
from synthorg.store.protocol import ExecutionStatus

from .harness import LOCAL_MODEL, UPSTREAM_MODEL, Harness

MESSAGES = [{"role": "user", "content": "hi"}]


async def _post(harness: Harness, token: str | None, **body: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    payload = {"model": UPSTREAM_MODEL, "messages": MESSAGES, **body}
    async with httpx.AsyncClient(base_url=harness.base_url) as client:
        return await client.post("/chat/completions", json=payload, headers=headers)


def _error(response: httpx.Response) -> dict[str, Any]:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param", "may_have_billed"}
    assert error["may_have_billed"] is False, "a refusal never reaches the upstream"
    assert error["message"]
    return error  # type: ignore[no-any-return]


async def test_missing_and_malformed_authorization(harness: Harness) -> None:
    response = await _post(harness, None)
    assert response.status_code == 401
    assert "missing bearer" in _error(response)["message"]
    async with httpx.AsyncClient(base_url=harness.base_url) as client:
        response = await client.post(
            "/chat/completions", json={}, headers={"authorization": "Basic x"}
        )
    assert response.status_code == 401
    assert "malformed" in _error(response)["message"]


async def test_bad_signature(harness: Harness, tmp_path: Any) -> None:
    other = GatewaySigner(
        load_or_create_key(tmp_path / "other.key"), served=lambda p, m: True, max_ttl_s=3600
    )
    binding, _ = await harness.run()
    token = other.mint(binding, ttl_s=60, ledger_id=harness.store.ledger_id)
    response = await _post(harness, token)
    assert response.status_code == 401
    error = _error(response)
    assert "signature invalid" in error["message"]
    assert error["type"] == "authentication_error"


async def test_expired(harness: Harness) -> None:
    binding, _ = await harness.run()
    key = load_or_create_key(harness.gateway.config.signing_key_file)
    past = GatewaySigner(
        key, served=lambda p, m: True, max_ttl_s=3600, clock=lambda: time.time() - 3600
    )
    response = await _post(harness, past.mint(binding, ttl_s=60, ledger_id=harness.store.ledger_id))
    assert response.status_code == 401
    assert "expired" in _error(response)["message"]


async def test_tampered_claims(harness: Harness) -> None:
    _, token = await harness.run(ceiling=Decimal("0.01"))
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["cost_ceiling"] = "1000000"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    response = await _post(harness, f"{header}.{forged}.{signature}")
    assert response.status_code == 401
    assert "tampered" in _error(response)["message"]


async def test_other_model(harness: Harness) -> None:
    _, token = await harness.run()
    response = await _post(harness, token, model="gpt-4o")
    assert response.status_code == 403
    error = _error(response)
    assert error["code"] == "model_mismatch" and "'up-model'" in error["message"]
    # A model another configured provider serves is just as refused.
    response = await _post(harness, token, model=LOCAL_MODEL)
    assert response.status_code == 403


async def test_other_provider(harness: Harness) -> None:
    _, token = await harness.run()
    response = await _post(harness, token, model=f"scripted/{UPSTREAM_MODEL}")
    assert response.status_code == 403
    error = _error(response)
    assert error["code"] == "provider_mismatch"
    assert "'upstream'" in error["message"] and "'scripted'" in error["message"]
    # The bound provider's own prefix is accepted.
    ok = await _post(harness, token, model=f"upstream/{UPSTREAM_MODEL}")
    assert ok.status_code == 200


async def test_binding_no_longer_served(harness: Harness) -> None:
    """A bearer minted elsewhere for a pair this gateway does not serve is refused."""
    key = load_or_create_key(harness.gateway.config.signing_key_file)
    lax = GatewaySigner(key, served=lambda p, m: True, max_ttl_s=3600)
    binding, _ = await harness.run()
    token = lax.mint(
        binding.model_copy(update={"model_id": "ghost"}),
        ttl_s=60,
        ledger_id=harness.store.ledger_id,
    )
    response = await _post(harness, token, model="ghost")
    assert response.status_code == 403
    assert _error(response)["code"] == "unbound_model"


async def test_finished_execution(harness: Harness) -> None:
    binding, token = await harness.run()
    assert (await _post(harness, token)).status_code == 200
    row = await harness.gateway.finish_execution(binding.execution_id)
    assert row.status == ExecutionStatus.FINISHED
    response = await _post(harness, token)
    assert response.status_code == 403
    assert _error(response)["code"] == "execution_finished"


async def test_killed_execution(harness: Harness) -> None:
    binding, token = await harness.run()
    await harness.gateway.kill_execution(binding.execution_id, "operator pressed stop")
    response = await _post(harness, token)
    assert response.status_code == 403
    error = _error(response)
    assert error["code"] == "execution_killed" and "operator pressed stop" in error["message"]


async def test_status_changed_in_the_store_by_another_process(harness: Harness) -> None:
    """The cached row is refreshed from the ledger, so a finish written elsewhere is seen."""
    binding, token = await harness.run()
    assert (await _post(harness, token)).status_code == 200
    await harness.store.set_execution_status(binding.execution_id, ExecutionStatus.FINISHED)
    harness.gateway.config.__dict__["ledger_refresh_s"] = 0.0  # refresh on every request
    response = await _post(harness, token)
    assert response.status_code == 403


async def test_invalid_body_and_unknown_route(harness: Harness) -> None:
    _, token = await harness.run()
    async with httpx.AsyncClient(base_url=harness.base_url) as client:
        headers = {"authorization": f"Bearer {token}"}
        response = await client.post("/chat/completions", json={"model": "x"}, headers=headers)
        assert response.status_code == 400
        assert "messages" in _error(response)["message"]
        response = await client.post("/chat/completions", content=b"{not json", headers=headers)
        assert response.status_code == 400
        response = await client.get("/v1/nothing")
        assert response.status_code == 404
        _error(response)
        response = await client.get("/models")
        assert response.status_code == 401


async def test_openai_client_raises_typed_errors(harness: Harness) -> None:
    binding, token = await harness.run()
    async with harness.client("garbage") as client:
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model=UPSTREAM_MODEL, messages=MESSAGES)  # type: ignore[arg-type]
    async with harness.client(token) as client:
        with pytest.raises(openai.PermissionDeniedError):
            await client.chat.completions.create(model="other", messages=MESSAGES)  # type: ignore[arg-type]
    await harness.gateway.finish_execution(binding.execution_id)
    async with harness.client(token) as client:
        with pytest.raises(openai.PermissionDeniedError, match="finished"):
            await client.chat.completions.create(model=UPSTREAM_MODEL, messages=MESSAGES)  # type: ignore[arg-type]


async def test_script_exhausted_is_loud(harness: Harness) -> None:
    _, token = await harness.run(model=LOCAL_MODEL, provider="scripted")
    history = [{"role": "user", "content": "x"}] + [
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "again"},
    ] * 3
    async with harness.client(token) as client:
        with pytest.raises(openai.InternalServerError, match=r"tool-script.*ran out of turns"):
            await client.chat.completions.create(model=LOCAL_MODEL, messages=history)  # type: ignore[arg-type]
        # A stream fails before its first byte: a proper 500, not a broken 200.
        with pytest.raises(openai.InternalServerError, match="ran out of turns"):
            await client.chat.completions.create(
                model=LOCAL_MODEL,
                messages=history,  # type: ignore[arg-type]
                stream=True,
            )
