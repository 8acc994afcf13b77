"""GatewaySigner and the key file: mint/verify, explicit binding, every way a bearer is refused."""

from __future__ import annotations

import base64
import json
import multiprocessing
import stat
import time
from decimal import Decimal
from pathlib import Path

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthorg.domain.binding import RunBinding
from synthorg.errors import ConfigError
from synthorg.gateway.signer import (
    CLOCK_SKEW_S,
    BearerError,
    GatewaySigner,
    UnboundModelError,
    load_or_create_key,
)

KEY = b"k" * 48
LEDGER = "ledger-1"
BINDING = RunBinding(
    execution_id="exec-1",
    agent_id="agent-1",
    task_id="task-1",
    project_id="proj-1",
    conversation_id="conv-1",
    provider="p",
    model_id="m",
    cost_ceiling=Decimal("1.25"),
)


def served(provider: str, model: str) -> bool:
    return (provider, model) == ("p", "m")


def signer(clock: float | None = None, key: bytes = KEY) -> GatewaySigner:
    if clock is None:
        return GatewaySigner(key, served=served, max_ttl_s=3600)
    return GatewaySigner(key, served=served, max_ttl_s=3600, clock=lambda: clock)


def test_round_trip_keeps_every_claim() -> None:
    token = signer().mint(BINDING, ttl_s=60, ledger_id=LEDGER)
    claims = signer().verify(token)
    assert (
        RunBinding.model_validate(claims.model_dump(include=set(RunBinding.model_fields)))
        == BINDING
    )
    assert claims.expires_at - claims.issued_at == 60
    assert claims.cost_ceiling == Decimal("1.25")
    assert (
        signer().verify(signer().mint(BINDING, ttl_s=60, ledger_id=LEDGER)).token_id
        != claims.token_id
    )


def test_unbound_model_fails_loud_at_mint() -> None:
    with pytest.raises(UnboundModelError, match="not served by provider"):
        signer().mint(BINDING.model_copy(update={"model_id": "other"}), ttl_s=60, ledger_id=LEDGER)
    with pytest.raises(UnboundModelError):
        signer().mint(BINDING.model_copy(update={"provider": "q"}), ttl_s=60, ledger_id=LEDGER)


def test_bad_ttl_and_short_key_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        signer().mint(BINDING, ttl_s=0, ledger_id=LEDGER)
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        GatewaySigner(b"short", served=served, max_ttl_s=3600)


def test_expired_by_the_injected_clock() -> None:
    now = time.time()
    token = signer(clock=now).mint(BINDING, ttl_s=10, ledger_id=LEDGER)
    assert signer(clock=now + 9).verify(token).execution_id == "exec-1"
    with pytest.raises(BearerError, match="expired"):
        signer(clock=now + 10).verify(token)


def test_a_clock_in_the_past_is_honoured_both_ways() -> None:
    """The injected clock, not PyJWT's wall clock, decides expiry."""
    past = time.time() - 10_000
    token = signer(clock=past).mint(BINDING, ttl_s=10, ledger_id=LEDGER)
    assert signer(clock=past + 1).verify(token).model_id == "m"
    with pytest.raises(BearerError, match="expired"):
        signer().verify(token)


def test_other_key_is_refused() -> None:
    token = signer(key=b"x" * 48).mint(BINDING, ttl_s=60, ledger_id=LEDGER)
    with pytest.raises(BearerError, match="signature invalid"):
        signer().verify(token)


def _tamper(token: str, **changes: object) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


@pytest.mark.parametrize(
    "changes",
    [{"model_id": "gpt-x"}, {"provider": "q"}, {"cost_ceiling": "1000"}, {"exp": 4_000_000_000}],
)
def test_tampered_claims_are_refused(changes: dict[str, object]) -> None:
    token = signer().mint(BINDING, ttl_s=60, ledger_id=LEDGER)
    with pytest.raises(BearerError, match="signature invalid"):
        signer().verify(_tamper(token, **changes))


def test_alg_none_and_garbage_are_refused() -> None:
    claims = {
        **BINDING.model_dump(mode="json"),
        "iat": 1,
        "exp": 4_000_000_000,
        "jti": "x",
        "lid": LEDGER,
        "aud": "synthorg-run",
        "iss": "synthorg-gateway",
    }
    unsigned = jwt.encode(claims, key=None, algorithm="none")
    with pytest.raises(BearerError):
        signer().verify(unsigned)
    with pytest.raises(BearerError):
        signer().verify("not-a-jwt")


def test_wrong_audience_or_missing_claims_are_refused() -> None:
    base = {
        **BINDING.model_dump(mode="json"),
        "iat": 1,
        "exp": 4_000_000_000,
        "jti": "x",
        "lid": LEDGER,
        "iss": "synthorg-gateway",
    }
    with pytest.raises(BearerError, match="invalid"):
        signer().verify(jwt.encode({**base, "aud": "someone-else"}, KEY, algorithm="HS256"))
    with pytest.raises(BearerError):
        signer().verify(
            jwt.encode({**base, "aud": "synthorg-run", "execution_id": ""}, KEY, algorithm="HS256")
        )
    no_exp = {k: v for k, v in base.items() if k != "exp"} | {"aud": "synthorg-run"}
    with pytest.raises(BearerError):
        signer().verify(jwt.encode(no_exp, KEY, algorithm="HS256"))


def test_key_file_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "gateway-signing.key"
    key = load_or_create_key(path)
    assert len(key) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(path) == key
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temp files left"


def _load(path: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(load_or_create_key(Path(path)))


def test_key_file_race_between_processes_yields_one_key(tmp_path: Path) -> None:
    path = tmp_path / "race" / "k.key"
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_load, args=(str(path), queue)) for _ in range(8)]
    for proc in procs:
        proc.start()
    keys = {queue.get(timeout=30) for _ in procs}
    for proc in procs:
        proc.join(timeout=30)
    assert keys == {path.read_bytes()}


def _forged(**claims: object) -> str:
    """A bearer signed with the gateway's own key (a leaked key, a buggy minter), its claims
    those a real mint gives, then ``claims`` over them."""
    genuine = jwt.decode(
        signer().mint(BINDING, ttl_s=60, ledger_id=LEDGER),
        options={"verify_signature": False},
    )
    return jwt.encode({**genuine, **claims}, KEY, algorithm="HS256")


def test_a_bearer_issued_in_the_future_is_refused() -> None:
    """Issue 29 (7): `iat` a day ahead was accepted (`verify_iat: False`)."""
    now = int(time.time())
    with pytest.raises(BearerError, match="issued in the future"):
        signer().verify(_forged(iat=now + 86_400, exp=now + 86_400 + 60))
    # Within the stated skew another host's clock is tolerated.
    assert signer().verify(_forged(iat=now + CLOCK_SKEW_S - 5, exp=now + 120)).model_id == "m"


def test_a_bearer_living_longer_than_the_configured_ttl_is_refused() -> None:
    """Issue 29 (7): `exp - iat` of 100 years was accepted while `token_ttl_s = 3600`."""
    now = int(time.time())
    strict = GatewaySigner(KEY, served=served, max_ttl_s=3600)
    with pytest.raises(BearerError, match="exceeds the gateway's token_ttl_s"):
        strict.verify(_forged(iat=now, exp=now + 100 * 365 * 86_400))
    assert strict.verify(_forged(iat=now, exp=now + 3600)).model_id == "m"


def test_minting_past_the_configured_ttl_is_refused() -> None:
    strict = GatewaySigner(KEY, served=served, max_ttl_s=3600)
    with pytest.raises(ConfigError, match="between 1 and 3600 s"):
        strict.mint(BINDING, ttl_s=100 * 365 * 86_400, ledger_id=LEDGER)
    assert strict.verify(strict.mint(BINDING, ttl_s=3600, ledger_id=LEDGER)).ledger_id == LEDGER


def test_a_bearer_names_its_ledger() -> None:
    claims = signer().verify(signer().mint(BINDING, ttl_s=60, ledger_id=LEDGER))
    assert claims.ledger_id == LEDGER
    genuine = jwt.decode(
        signer().mint(BINDING, ttl_s=60, ledger_id=LEDGER), options={"verify_signature": False}
    )
    del genuine["lid"]
    with pytest.raises(BearerError):
        signer().verify(jwt.encode(genuine, KEY, algorithm="HS256"))


@settings(max_examples=300, deadline=None)
@given(
    issued=st.integers(min_value=-10 * 86_400, max_value=10 * 86_400),
    lifetime=st.integers(min_value=-86_400, max_value=200 * 365 * 86_400),
)
def test_a_bearer_is_accepted_exactly_within_its_stated_bounds(issued: int, lifetime: int) -> None:
    """Over any forged (iat, exp) signed with the real key: accepted iff not expired, issued
    at most CLOCK_SKEW_S ahead, and living at most the configured token_ttl_s."""
    now = 1_900_000_000
    strict = GatewaySigner(KEY, served=served, max_ttl_s=3600, clock=lambda: now)
    iat, exp = now + issued, now + issued + lifetime
    token = _forged(iat=iat, exp=exp)
    valid = exp > now and iat <= now + CLOCK_SKEW_S and exp - iat <= 3600
    try:
        strict.verify(token)
    except BearerError:
        assert not valid, (issued, lifetime)
    else:
        assert valid, (issued, lifetime)
