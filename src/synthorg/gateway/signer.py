"""The gateway signer: mints and verifies per-run bearers bound to one execution.

A bearer binds (execution, agent, task, project, conversation, provider, model, cost ceiling),
the ledger that opened its run (``lid``: the store's own id) and a lifetime. Explicit Provider
Binding is enforced at mint: a (provider, model) pair that no configured provider serves fails
loud; nothing picks a provider on the caller's behalf. A bearer issued more than
``CLOCK_SKEW_S`` in the future, or living longer than the configured ``token_ttl_s``, is
refused: a leaked key's forgeries cannot outlive the rule either.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from synthorg.domain.binding import RunBinding
from synthorg.errors import ConfigError, SynthOrgError
from synthorg.localsock import private_dir

_ALGORITHM = "HS256"
_AUDIENCE = "synthorg-run"
_ISSUER = "synthorg-gateway"
_MIN_KEY_BYTES = 32
_VERIFIED_CACHE = 4096
CLOCK_SKEW_S = 60
"""How far in the future a bearer's ``iat`` may be (another host's clock) before it is refused."""


class BearerError(SynthOrgError):
    """A bearer was refused: bad signature, expired, tampered or malformed."""


class UnboundModelError(ConfigError):
    """No configured provider serves the requested (provider, model) pair."""


class BearerClaims(RunBinding):
    """A verified bearer's claims."""

    issued_at: int = Field(description="Unix time the bearer was minted.")
    expires_at: int = Field(description="Unix time after which it is refused.")
    token_id: str = Field(description="Unique id of this bearer.")
    ledger_id: str = Field(min_length=1, description="The ledger (store) that opened its run.")


ModelServed = Callable[[str, str], bool]
"""(provider, model) -> whether a configured provider serves that model."""


class GatewaySigner:
    """Mints and verifies per-run bearers with one symmetric key."""

    def __init__(
        self,
        key: bytes,
        *,
        served: ModelServed,
        max_ttl_s: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if len(key) < _MIN_KEY_BYTES:
            raise ConfigError(
                f"gateway signing key must be at least {_MIN_KEY_BYTES} bytes; "
                "remove it to have one generated into the data dir"
            )
        self._key = key
        self._served = served
        self._max_ttl_s = max_ttl_s
        self._clock = clock
        # Verified bearers by token string: a run sends the same bearer on every request, and
        # PyJWT's decode costs ~100 us. The signature verdict of a given string never changes;
        # expiry is re-checked on every hit.
        self._verified: dict[str, BearerClaims] = {}

    def mint(self, binding: RunBinding, *, ttl_s: int, ledger_id: str) -> str:
        """A signed bearer for ``binding``, opened in ledger ``ledger_id``, valid for ``ttl_s``
        seconds (at most the configured ``token_ttl_s``)."""
        self.check(binding, ttl_s=ttl_s)
        if not ledger_id:
            raise ConfigError("a bearer names the ledger that opened its run; none was given")
        import jwt  # see _decode

        now = int(self._clock())
        payload: dict[str, Any] = binding.model_dump(mode="json")
        payload.update(
            iat=now,
            exp=now + ttl_s,
            jti=secrets.token_hex(12),
            lid=ledger_id,
            aud=_AUDIENCE,
            iss=_ISSUER,
        )
        return jwt.encode(payload, self._key, algorithm=_ALGORITHM)

    def check(self, binding: RunBinding, *, ttl_s: int) -> None:
        """Refuse what ``mint`` would refuse (a lifetime out of bounds, an unbound model)."""
        if not 0 < ttl_s <= self._max_ttl_s:
            raise ConfigError(
                f"bearer ttl must be between 1 and {self._max_ttl_s} s (the gateway's "
                f"token_ttl_s), got {ttl_s}; raise [gateway] token_ttl_s for longer bearers"
            )
        if not self._served(binding.provider, binding.model_id):
            raise UnboundModelError(
                f"model {binding.model_id!r} is not served by provider {binding.provider!r}; "
                "bind the model to a configured provider in the gateway config "
                "(no provider is picked automatically)"
            )

    def verify(self, token: str) -> BearerClaims:
        """The claims of a valid bearer; BearerError naming what is wrong otherwise."""
        cached = self._verified.get(token)
        if cached is not None:
            if cached.expires_at <= self._clock():
                del self._verified[token]
                raise BearerError("bearer expired; mint a new one for this run")
            return cached
        claims = self._decode(token)
        if len(self._verified) >= _VERIFIED_CACHE:
            self._verified.pop(next(iter(self._verified)))  # oldest first
        self._verified[token] = claims
        return claims

    def _decode(self, token: str) -> BearerClaims:
        # PyJWT loads cryptography's x509 and ssh modules (~0.12 s of CPU): paid by the first
        # bearer, not by every process that builds the gateway (`serve` before /ready).
        import jwt

        try:
            payload = jwt.decode(
                token,
                self._key,
                algorithms=[_ALGORITHM],
                audience=_AUDIENCE,
                issuer=_ISSUER,
                # Expiry is checked below against the injected clock, not PyJWT's wall clock.
                options={
                    "require": ["exp", "iat", "jti", "lid", "aud", "iss"],
                    "verify_iat": False,
                    "verify_exp": False,
                },
                leeway=0,
            )
        except jwt.ExpiredSignatureError as exc:
            raise BearerError("bearer expired; mint a new one for this run") from exc
        except jwt.InvalidSignatureError as exc:
            raise BearerError("bearer signature invalid (tampered or another key)") from exc
        except jwt.PyJWTError as exc:
            raise BearerError(f"bearer invalid: {exc}") from exc
        issued, expires = payload["iat"], payload["exp"]
        if not isinstance(expires, int) or not isinstance(issued, int):
            raise BearerError("bearer claims malformed: iat and exp must be integers")
        now = self._clock()
        if expires <= now:
            raise BearerError("bearer expired; mint a new one for this run")
        if issued > now + CLOCK_SKEW_S:
            raise BearerError(
                f"bearer issued in the future (iat {issued - now:.0f} s ahead, more than the "
                f"{CLOCK_SKEW_S} s of clock skew allowed)"
            )
        if expires - issued > self._max_ttl_s:
            raise BearerError(
                f"bearer lifetime {expires - issued} s exceeds the gateway's token_ttl_s "
                f"({self._max_ttl_s} s)"
            )
        try:
            return BearerClaims(
                issued_at=payload.pop("iat"),
                expires_at=payload.pop("exp"),
                token_id=payload.pop("jti"),
                ledger_id=payload.pop("lid"),
                **{k: v for k, v in payload.items() if k not in {"aud", "iss"}},
            )
        except ValidationError as exc:
            raise BearerError(f"bearer claims malformed: {exc.error_count()} problem(s)") from exc


def load_or_create_key(path: Path) -> bytes:
    """The signing key at ``path``, generated (0600, atomically) when absent."""
    private_dir(path.parent)  # checked before it is read: a planted key forges bearers
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = secrets.token_bytes(48)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        try:
            os.link(tmp, path)  # first writer wins if two processes race
        except FileExistsError:
            key = path.read_bytes()
        finally:
            tmp.unlink()
    return key
