"""No run of 8 or more characters of a secret survives redaction, in any encoding (hypothesis).

A forge may echo parts of its token (a prefix, a suffix, a middle, the characters spaced out).
The property: take random tokens, embed random fragments of each (any position, any length of
at least 8, any encoding the redactor knows, optionally with single whitespace between
characters) in random text, redact, and no 8-character window of any encoded form of the
token is left, even after joining characters that single whitespace separates.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

from hypothesis import example, given, settings
from hypothesis import strategies as st

from synthorg.mcp.redact import REDACTED, Redactor

RUN = 8
TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
# Filler shares no character with any encoded form, so a window of a form found in the
# output can only come from the token.
FILLER = " .,;!\n()<>{}é漢\t\"'"
SEPARATORS = " \t\n"

tokens = st.text(alphabet=TOKEN_ALPHABET, min_size=12, max_size=48)


def _percent_all(data: bytes, upper: bool) -> str:
    return "".join(f"%{b:02X}" if upper else f"%{b:02x}" for b in data)


def _b64(flavour: Callable[[bytes], bytes]) -> Callable[[bytes], str]:
    return lambda data: flavour(data).decode()


# How a fragment's bytes are written into the text (base64 gets neighbouring bytes too).
ENCODERS: dict[str, Callable[[bytes], str]] = {
    "raw": lambda data: data.decode(),
    "percent-lower": lambda data: _percent_all(data, upper=False),
    "percent-upper": lambda data: _percent_all(data, upper=True),
    "hex": lambda data: data.hex(),
    "HEX": lambda data: data.hex().upper(),
    "b64-std": _b64(base64.b64encode),
    "b64-url": _b64(base64.urlsafe_b64encode),
}
FOLDED = {"percent-lower", "percent-upper", "hex", "HEX"}


def _full_forms(token: str) -> list[tuple[str, bool]]:
    """Each encoded form of the whole token (the part depending on it alone), case-folded?"""
    raw = token.encode()
    forms = [(token, False), (raw.hex(), True), (_percent_all(raw, upper=False), True)]
    for pad in range(3):
        for flavour in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = flavour(b"\xfe" * pad + raw).decode()
            forms.append((encoded[-(-8 * pad // 6) :], False))
    return forms


def _collapsed(out: str) -> str:
    """Markers out, and characters that single whitespace separates joined."""
    return re.sub(r"(?<=\S)\s(?=\S)", "", out.replace(REDACTED, "\x00"))


def _surviving(out: str, token: str) -> list[str]:
    text = _collapsed(out)
    folded_text = text.lower()
    found = []
    for form, folded in _full_forms(token):
        haystack, needle = (folded_text, form.lower()) if folded else (text, form)
        for i in range(len(needle) - RUN + 1):
            if needle[i : i + RUN] in haystack:
                found.append(needle[i : i + RUN])
    return found


@st.composite
def fragment_texts(draw: st.DrawFn) -> tuple[str, str]:
    token = draw(tokens)
    parts = [draw(st.text(alphabet=FILLER, max_size=8))]
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(token) - RUN))
        end = draw(st.integers(start + RUN, len(token)))
        data = token[start:end].encode()
        encoding = draw(st.sampled_from(sorted(ENCODERS)))
        if encoding.startswith("b64"):
            # Inside a larger encoded value (``Basic base64(user:token)``): any alignment.
            data = b"\xfe" * draw(st.integers(0, 2)) + data + b"\xfd" * draw(st.integers(0, 2))
        encoded = ENCODERS[encoding](data)
        gaps = draw(st.sets(st.integers(1, len(encoded) - 1), max_size=len(encoded)))
        spaced = "".join(
            (draw(st.sampled_from(SEPARATORS)) if i in gaps else "") + ch
            for i, ch in enumerate(encoded)
        )
        parts.append(spaced)
        parts.append(draw(st.text(alphabet=FILLER, max_size=8)))
    return token, "".join(parts)


TOKEN = "AUDforge_Lq3J8kZ2xWv9bN4mR7tY1pQ"


@settings(max_examples=400, deadline=None)
@given(fragment_texts())
@example((TOKEN, f"Validation failed for token {TOKEN[:12]}; tail {TOKEN[-12:]}"))
@example((TOKEN, f"middle {TOKEN[6:26]} end"))
@example((TOKEN, "spaced " + " ".join(TOKEN[5:25])))
@example((TOKEN, "chunks " + " ".join(TOKEN[i : i + 5] for i in range(0, 30, 5))))
def test_no_run_of_eight_characters_of_a_secret_survives(case: tuple[str, str]) -> None:
    token, text = case
    out = Redactor([token]).text(text)
    assert not _surviving(out, token), (out, _surviving(out, token))


def test_text_without_secrets_is_left_alone() -> None:
    redactor = Redactor(["ghp_forgeAPItoken_9d8c7b6a5f4e3d2c1b0a"])
    text = "commit 5b1f0e9a7c3d merged; the forge token was rotated; see ghp_ docs"
    assert redactor.text(text) == text
    # Word-like test tokens: a quoted form keeps the secret's letter case ("gitPUSHt" is not
    # "git push t").
    message = "error: git push timed out after 5s"
    assert Redactor(["ghs_gitPUSHtoken_5b1f0e9a7c3d4e2f8a6b"]).text(message) == message


def test_a_secret_shorter_than_a_run_is_redacted_whole_and_spaced() -> None:
    redactor = Redactor(["Zq7_Wx"])
    assert redactor.text("a Zq7_Wx b Z q 7 _ W x c Zq7_W") == f"a {REDACTED} b {REDACTED} c Zq7_W"
