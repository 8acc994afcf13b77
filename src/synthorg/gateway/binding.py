"""Who may call and what: a request's verified bearer, and the one provider/model it is bound to."""

from __future__ import annotations

from collections.abc import Container

from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.liveness import issued_elsewhere
from synthorg.gateway.refusals import forbidden, unauthorized
from synthorg.gateway.signer import BearerClaims, BearerError, GatewaySigner


def authenticate(signer: GatewaySigner, authorization: str | None, ledger_id: str) -> BearerClaims:
    """The verified claims of the request's bearer, issued by ledger ``ledger_id``; 401
    otherwise."""
    if not authorization:
        raise unauthorized("missing bearer: send 'Authorization: Bearer <run token>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("malformed Authorization header: expected 'Bearer <run token>'")
    try:
        claims = signer.verify(token.strip())
    except BearerError as exc:
        raise unauthorized(str(exc)) from exc
    foreign = issued_elsewhere(claims.ledger_id, ledger_id)
    if foreign is not None:
        raise unauthorized(foreign)
    return claims


def resolve_model(
    config: GatewayConfig, served: Container[str], claims: BearerClaims, requested: str
) -> str:
    """The upstream model id for ``requested``; 403 unless it is exactly the bound one.

    ``served`` names the providers this gateway has clients for.
    """
    bound, provider = claims.model_id, claims.provider
    if requested in (bound, f"openai/{bound}", f"{provider}/{bound}"):
        if not config.serves(provider, bound) or provider not in served:
            raise forbidden(
                f"bearer is bound to provider {provider!r} / model {bound!r}, which this "
                "gateway does not serve",
                "unbound_model",
            )
        return bound
    prefix, sep, _ = requested.partition("/")
    configured = {p.name for p in config.providers}
    if sep and prefix in configured and prefix not in (provider, "openai"):
        raise forbidden(
            f"bearer is bound to provider {provider!r}; provider {prefix!r} was requested",
            "provider_mismatch",
        )
    raise forbidden(
        f"bearer is bound to model {bound!r}; model {requested!r} was requested",
        "model_mismatch",
    )
