"""Redaction: every form a vault secret can take in text is replaced before text leaves."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

REDACTED = "[REDACTED]"
_MIN_SECRET = 4  # shorter values would redact ordinary words; the vault refuses nothing else


def _variants(secret: str) -> set[str]:
    # git and HTTP libraries echo credentials URL-quoted or inside a Basic header, so each
    # form is redacted, including base64 of "user:secret" for any user: the secret's own
    # base64 characters at each of the three byte alignments.
    out = {secret, quote(secret, safe=""), quote(secret)}
    raw = secret.encode()
    for pad in range(3):
        data = b"\0" * pad + raw
        encoded = base64.b64encode(data).decode()
        # Keep only the characters whose 6 bits all come from the secret: skip those
        # sharing bits with the pad bytes and the last group when it is partial.
        core = encoded[(8 * pad + 5) // 6 : 4 * (len(data) // 3)]
        if len(core) >= 8:
            out.add(core)
    return {v for v in out if len(v) >= _MIN_SECRET}


class Redactor:
    """Replaces known secrets (and their encoded forms) in strings and JSON-like values."""

    def __init__(self, secrets: Iterable[str]) -> None:
        variants: set[str] = set()
        for secret in secrets:
            if len(secret) >= _MIN_SECRET:
                variants |= _variants(secret)
        # Longest first so a secret's prefix never leaves the rest of it behind.
        self._variants = sorted(variants, key=len, reverse=True)

    def text(self, value: str) -> str:
        """``value`` with every secret form replaced by REDACTED."""
        for variant in self._variants:
            if variant in value:
                value = value.replace(variant, REDACTED)
        return value

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys too) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value
