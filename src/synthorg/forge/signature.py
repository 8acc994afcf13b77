"""A delivery's signature, checked in constant time over the raw body before it is parsed."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from gidgethub import BadRequest, ValidationFailure
from gidgethub.sansio import Event

from synthorg.errors import SynthOrgError


class BadSignatureError(SynthOrgError):
    """The delivery is not signed with the project's secret (or not signed at all)."""


class BadDeliveryError(SynthOrgError):
    """Signed, but not a delivery GitHub sends (headers or JSON body missing)."""


def verified_event(headers: Mapping[str, str], body: bytes, secret: str) -> Event:
    """The delivery as an event, once its ``X-Hub-Signature-256`` matches ``body``.

    Only the SHA-256 header counts: gidgethub would accept the legacy SHA-1 one too.
    gidgethub compares with ``hmac.compare_digest`` and decodes the body only after that.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    signature = lower.get("x-hub-signature-256", "")
    if not signature.startswith("sha256="):
        raise BadSignatureError("missing or malformed X-Hub-Signature-256")
    wanted: dict[str, Any] = {
        "x-hub-signature-256": signature,
        "content-type": lower.get("content-type", ""),
        "x-github-event": lower.get("x-github-event", ""),
        "x-github-delivery": lower.get("x-github-delivery", ""),
    }
    try:
        event = Event.from_http(wanted, body, secret=secret)
    except ValidationFailure as exc:
        raise BadSignatureError("the signature does not match the body") from exc
    except (BadRequest, ValueError) as exc:
        raise BadDeliveryError(f"not a JSON delivery: {exc}") from exc
    if not event.event or not event.delivery_id or not isinstance(event.data, dict):
        raise BadDeliveryError("X-GitHub-Event, X-GitHub-Delivery and a JSON object are needed")
    return event


def sign(body: bytes, secret: str) -> str:
    """The ``X-Hub-Signature-256`` GitHub would send for ``body`` (replay, tests)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
