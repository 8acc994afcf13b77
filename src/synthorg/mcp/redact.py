"""Redaction: every form a vault secret can take in text is replaced before text leaves.

The forms: the secret itself, percent-encoded (as URL libraries and git quote it, any hex case),
hex (any case), and base64 / url-safe base64 at each of the three byte alignments (as inside
``Authorization: Basic base64(user:secret)``), including the characters at the secret's end.

Order matters: redact, *then* cut. ``cut`` never splits a redaction marker, and text read from a
source that was itself cut (``source_cut``) also loses a trailing piece of a secret whose rest
lies beyond the cut.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

REDACTED = "[REDACTED]"
MIN_SECRET = 4
"""Shorter values would redact ordinary words; the vault holds nothing that short."""
MIN_PIECE = 4
"""The shortest trailing piece of a secret form redacted at a source cut."""
_B64_CORE_MIN = 8


def _b64_forms(raw: bytes) -> set[str]:
    # The characters of base64(pad + secret + anything) that depend on the secret's bits only,
    # at each alignment; and the closed form (the secret ends the data: '=' padding).
    out: set[str] = set()
    for pad in range(3):
        data = b"\0" * pad + raw
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(data).decode()
            start = -(-8 * pad // 6)  # first character with no pad bits
            end = 8 * len(data) // 6  # characters wholly inside the data's bits
            core = encoded[start:end]
            if len(core) >= _B64_CORE_MIN:
                out.add(core)
                # When the secret ends the data, its last (padded) characters are fixed too.
                out.add(encoded[start:])
                out.add(encoded[start:].rstrip("="))
    return out


def _forms(secret: str) -> tuple[set[str], set[str]]:
    """(case-sensitive forms, case-insensitive forms) of one secret."""
    raw = secret.encode()
    exact = {secret, *_b64_forms(raw)}
    folded = {
        quote(secret, safe=""),
        quote(secret),
        "".join(f"%{b:02x}" for b in raw),
        raw.hex(),
    }
    return exact, folded


class Redactor:
    """Replaces known secrets (and their encoded forms) in strings and JSON-like values."""

    def __init__(self, secrets: Iterable[str]) -> None:
        exact: set[str] = set()
        folded: set[str] = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET:
                e, f = _forms(secret)
                exact |= e
                folded |= {v.lower() for v in f}
        folded = {v for v in folded if len(v) >= MIN_SECRET}
        self._exact = tuple(sorted(exact, key=len, reverse=True))
        self._folded = tuple(sorted(folded, key=len, reverse=True))
        # One alternation, longest first, so a form's prefix never leaves the rest behind.
        parts = sorted(
            [(v, re.escape(v)) for v in self._exact]
            + [(v, f"(?i:{re.escape(v)})") for v in self._folded],
            key=lambda item: len(item[0]),
            reverse=True,
        )
        self._pattern = re.compile("|".join(p for _, p in parts)) if parts else None

    @property
    def longest(self) -> int:
        """Length of the longest form (how far past a cut a source must be read)."""
        return max((len(v) for v in (*self._exact, *self._folded)), default=0)

    def text(self, value: str, *, source_cut: bool = False) -> str:
        """``value`` with every secret form replaced by REDACTED.

        ``source_cut``: ``value`` is the start of a longer text, so a secret form may begin at
        its end and continue past it; such a trailing piece is redacted too.
        """
        if self._pattern is None:
            return value
        value = self._pattern.sub(REDACTED, value)
        if source_cut:
            piece = self._trailing_piece(value)
            if piece:
                value = value[:-piece] + REDACTED
        return value

    def _trailing_piece(self, value: str) -> int:
        """Length of the longest end of ``value`` beginning a secret form (0: under MIN_PIECE)."""
        longest = 0
        for forms, text in ((self._exact, value), (self._folded, value.lower())):
            for form in forms:
                for size in range(
                    min(len(form) - 1, len(text)), max(MIN_PIECE, longest + 1) - 1, -1
                ):
                    if text.endswith(form[:size]):
                        longest = size
                        break
        return longest

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys too) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def _marker_around(text: str, pos: int) -> tuple[int, int] | None:
    """The REDACTED marker that ``pos`` falls strictly inside, as (start, end)."""
    start = text.find(REDACTED, max(0, pos - len(REDACTED) + 1), pos + len(REDACTED) - 1)
    if start != -1 and start < pos < start + len(REDACTED):
        return start, start + len(REDACTED)
    return None


def cut(text: str, limit: int, *, keep: str = "head") -> str:
    """At most ``limit`` characters of already-redacted ``text``, never half a marker.

    ``keep="head"`` keeps the start, ``"tail"`` the end (for a command's last error lines).
    """
    if len(text) <= limit:
        return text
    if keep == "head":
        around = _marker_around(text, limit)
        return text[: around[0] if around else limit]
    around = _marker_around(text, len(text) - limit)
    return text[around[1] if around else len(text) - limit :]
