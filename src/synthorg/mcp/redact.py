"""Redaction: every run of 8 characters of a vault secret, in any form it takes, is replaced.

The forms: the secret itself, percent-encoded (as URL libraries and git quote it, either hex
case; every byte escaped, any case), hex (any case), and base64 / url-safe base64 at each of
the three byte alignments (as inside ``Authorization: Basic base64(user:secret)``), including
the characters at the secret's end.
Not only whole forms: a forge that echoes a prefix, a middle or a suffix of its token, or the
token spaced out, must not pass those either. So the unit is a window of ``RUN`` characters of
a form, single whitespace allowed between them (a shorter form is its own window); every window
found is replaced, overlapping and touching windows as one marker.

Finding them costs a few passes in C, about what the whole-form regex it replaces cost
(``benchmarks/redact_bench.py``). With single whitespace taken out, every
window covers a whole 4-character block at a multiple of 4; so the text is cut into such blocks
(``re.findall``), a set intersection keeps those that are 4-grams of a form, and only where such
a 4-gram occurs is a window looked for, at the few starts that could contain it.

Order matters: redact, *then* cut. ``cut`` never splits a redaction marker, and text read from a
source that was itself cut (``source_cut``) also loses a trailing piece of a secret whose rest
lies beyond the cut.
"""

from __future__ import annotations

import base64
import bisect
import functools
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

REDACTED = "[REDACTED]"
MIN_SECRET = 4
"""Shorter values would redact ordinary words; the vault holds nothing that short."""
RUN = 8
"""The longest run of a secret form's characters that may survive is ``RUN - 1``."""
MIN_PIECE = 4
"""The shortest trailing piece of a secret form redacted at a source cut."""
_BLOCK = 4
"""Any RUN consecutive characters contain a whole block of this size at a multiple of it."""
assert RUN >= 2 * _BLOCK - 1
_LONE_SPACE = re.compile(r"(?<=\S)\s(?=\S)")
_BLOCKS = re.compile(f"(?s).{{{_BLOCK}}}")


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
            out.add(encoded[start:end])
            # When the secret ends the data, its last (padded) characters are fixed too.
            out.add(encoded[start:])
    return {form for form in out if form}


def _lower_escapes(text: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def _forms(secret: str) -> tuple[set[str], set[str]]:
    """(case-sensitive forms, case-insensitive forms lower-cased) of one secret.

    Only forms made of hex digits (and '%') are matched in any case: in a quoted form the
    secret's own letters keep their case, or ordinary words would match a word-like secret.
    """
    raw = secret.encode()
    quoted = {quote(secret, safe=""), quote(secret)}
    exact = {secret, *_b64_forms(raw), *quoted, *map(_lower_escapes, quoted)}
    folded = {"".join(f"%{b:02x}" for b in raw), raw.hex()}
    return exact, folded


def _grams(forms: Iterable[str], size: int) -> set[str]:
    return {form[i : i + size] for form in forms for i in range(len(form) - size + 1)}


def _cases(gram: str) -> set[str]:
    """Every upper/lower-case spelling of ``gram`` (a folded form is matched in any case)."""
    return {"".join(chars) for chars in itertools.product(*({c.lower(), c.upper()} for c in gram))}


def _spaced(literal: str) -> str:
    return r"\s?".join(re.escape(ch) for ch in literal)


@dataclass(frozen=True, slots=True)
class _Matcher:
    """What one set of secrets is matched with (built once per set: the server asks per call)."""

    exact: tuple[str, ...]
    folded: tuple[str, ...]
    windows: frozenset[str]
    """Every RUN-window of a case-sensitive form."""
    folded_windows: frozenset[str]
    """Every RUN-window of a case-insensitive form, lower-cased."""
    blocks: frozenset[str]
    """Every 4-gram of a long form (a case-insensitive one in every case)."""
    short: re.Pattern[str] | None
    """The forms shorter than RUN, whole (spaced out too)."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where windows of a form lie in ``text``, as (start, end), by start."""
        found: list[tuple[int, int]] = []
        if self.short is not None:
            found += [(m.start(), m.end(1)) for m in self.short.finditer(text)]
        parts = _LONE_SPACE.split(text)  # the text with single whitespace taken out, in pieces
        joined = "".join(parts)
        hits = self.blocks.intersection(_BLOCKS.findall(joined))
        aligned = sorted(
            at for block in hits for at in _occurrences(joined, block) if at % _BLOCK == 0
        )
        windows: list[tuple[int, int]] = []
        for at in aligned:
            # A window holding this block starts at most a block before it.
            for start in range(max(0, at - _BLOCK, windows[-1][0] + 1 if windows else 0), at + 1):
                chars = joined[start : start + RUN]
                if chars in self.windows or chars.lower() in self.folded_windows:
                    windows.append((start, start + RUN))
        if windows:
            ends = list(itertools.accumulate(map(len, parts)))

            def original(at: int) -> int:  # each piece before ``at`` lost one character after it
                return at + bisect.bisect_right(ends, at)

            found += [(original(start), original(end - 1) + 1) for start, end in windows]
        return sorted(found)


def _occurrences(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at != -1:
        yield at
        at = text.find(needle, at + 1)


@functools.lru_cache(maxsize=64)
def _matcher(secrets: frozenset[str]) -> _Matcher:
    exact: set[str] = set()
    folded: set[str] = set()
    for secret in secrets:
        e, f = _forms(secret)
        exact |= e
        folded |= f
    folded = {v for v in folded if len(v) >= MIN_SECRET}
    long_exact = {f for f in exact if len(f) >= RUN}
    long_folded = {f for f in folded if len(f) >= RUN}
    short = sorted((exact | folded) - long_exact - long_folded, key=len, reverse=True)
    short_pattern = None
    if short:
        parts = [_spaced(f) if f in exact else f"(?i:{_spaced(f)})" for f in short]
        short_pattern = re.compile(f"(?=({'|'.join(parts)}))")
    blocks = _grams(long_exact, _BLOCK)
    for gram in _grams(long_folded, _BLOCK):
        blocks |= _cases(gram)
    by_length = functools.partial(sorted, key=len, reverse=True)
    return _Matcher(
        exact=tuple(by_length(exact)),
        folded=tuple(by_length(folded)),
        windows=frozenset(_grams(long_exact, RUN)),
        folded_windows=frozenset(_grams(long_folded, RUN)),
        blocks=frozenset(blocks),
        short=short_pattern,
    )


class Redactor:
    """Replaces runs of known secrets (in every encoded form) in strings and JSON-like values."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._matcher = _matcher(frozenset(s for s in secrets if len(s) >= MIN_SECRET))
        self._exact = self._matcher.exact
        self._folded = self._matcher.folded

    @property
    def longest(self) -> int:
        """How far past a cut a source must be read to see any form whole (spaced out too)."""
        return 2 * max((len(v) for v in (*self._exact, *self._folded)), default=0)

    def text(self, value: str, *, source_cut: bool = False) -> str:
        """``value`` with every run of a secret form replaced by REDACTED.

        ``source_cut``: ``value`` is the start of a longer text, so a secret form may begin at
        its end and continue past it; such a trailing piece is redacted too.
        """
        if not self._exact and not self._folded:
            return value
        out: list[str] = []
        done = 0  # everything before this index is written or redacted
        span_start = span_end = -1
        for start, end in self._matcher.spans(value):
            if start <= span_end:  # overlaps or touches the current span: extend it
                span_end = max(span_end, end)
                continue
            if span_end >= 0:
                out += (value[done:span_start], REDACTED)
                done = span_end
            span_start, span_end = start, end
        if span_end >= 0:
            out += (value[done:span_start], REDACTED)
            done = span_end
        out.append(value[done:])
        value = "".join(out)
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
