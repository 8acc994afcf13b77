"""Untrusted text on a terminal: control characters shown as escapes, never interpreted.

Tool output, model output, task text, file and branch names and error messages can carry
escape sequences (OSC 0 title, OSC 52 clipboard write, erase-line, cursor movement, colours)
that would let a command draw a fake line or write the clipboard. Every place the CLI prints
such text goes through :func:`visible` (or :func:`untrusted` for rich output, which also
keeps the text out of rich's markup parser). SGR colours are not kept: parsing them safely
buys nothing a reader needs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

# C0 except tab/newline, DEL, C1, soft hyphen, combining grapheme joiner, Arabic letter mark,
# Hangul fillers, Khmer and Mongolian invisibles, zero-width and bidi marks, line and
# paragraph separators, embeddings, overrides and isolates (Trojan Source), word joiner and
# invisible operators, variation selectors, BOM, interlinear annotations, musical format
# controls, tags, lone surrogates (these would also make printing fail with
# UnicodeEncodeError). The console's web/static/reveal.js mirrors this set exactly.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5"
    "\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff"
    "\uffa0\ufff9-\ufffb\U0001d173-\U0001d17a\U000e0000-\U000e0fff\ud800-\udfff]"
)
_CONTROL_OR_NEWLINE = re.compile(_CONTROL.pattern[:-1] + "\n]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


# Relative cursor movement and erase-in-line (CSI A-D, G, K): a terminal program's redraws
# (the OpenHands terminal echoes each command with hundreds of them). Shown as escapes they are
# a wall of noise; removed from tool output they can neither colour nor hide anything.
_CURSOR = re.compile("(?:\x1b\\[|\x9b)[0-9]{0,5}[A-DGK]")


def visible(text: str, *, newlines: bool = True) -> str:
    """``text`` with every control character replaced by its ``\\xNN``/``\\uNNNN`` escape.

    Newlines are kept unless ``newlines`` is False (one-line fields: names, titles).
    """
    return (_CONTROL if newlines else _CONTROL_OR_NEWLINE).sub(_escape, text)


def without_cursor_moves(output: str) -> str:
    """Tool output without relative cursor movement and erase-in-line (then shown through
    :func:`visible`). Only for output: an action to approve is shown whole, escapes and all."""
    return _CURSOR.sub("", output)


def hidden_count(text: str) -> int:
    """How many characters :func:`visible` escapes in ``text`` (newlines not counted): the
    number a view flags, since such a character can make text read differently from what runs."""
    return len(_CONTROL.findall(text))


def untrusted(text: str, style: str = "", *, newlines: bool = True) -> Text:
    """``text`` as rich Text: escapes made visible, never parsed as markup."""
    from rich.text import Text

    return Text(visible(text, newlines=newlines), style=style)
