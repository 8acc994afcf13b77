"""Untrusted text is shown with its control characters visible, never interpreted."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from synthorg.cli.render import event_line
from synthorg.cli.untrusted import visible
from synthorg.domain import FinishedEvent, ObservationEvent, StoredEvent
from tests.cli.cli_support import RAW_CONTROL

_NEVER = set(RAW_CONTROL) | {"\u202e", "\u2066", "\u200f", "\ud800"}


@given(st.text())
def test_visible_text_has_no_control_character_left(text: str) -> None:
    shown = visible(text)
    assert not set(shown) & _NEVER
    assert "\n" not in visible(text, newlines=False)
    shown.encode()  # lone surrogates would make printing fail


# Invisible characters of other categories that visible() escapes too (fillers, selectors).
_ALSO_HIDDEN = "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u3164\uffa0"


@given(
    st.text(
        alphabet=st.characters(
            blacklist_categories=["Cc", "Cf", "Cs", "Zl", "Zp"], blacklist_characters=_ALSO_HIDDEN
        ).filter(lambda c: not ("\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef"))
    )
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert visible(text) == text


def test_each_escape_is_shown_by_its_code() -> None:
    assert visible("\x1b]52;c;eA==\x07") == "\\x1b]52;c;eA==\\x07"
    assert visible("a\rb\x9b1m\u202ec\n") == "a\\rb\\x9b1m\\u202ec\n".replace("\\r", "\\x0d")


def _rendered(*events: object) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=200)
    for seq, event in enumerate(events, 1):
        stored = StoredEvent(
            conversation_id="conv-1", seq=seq, timestamp=datetime.now(UTC), event=event
        )
        console.print(event_line(stored))
    return out.getvalue()


def test_a_rendered_event_carries_only_our_own_colours() -> None:
    hostile = "\x1b]0;title\x07\x1b[2K\r\x1b[32m    9 ✔ finished\x1b[0m\n[bold red]x[/]"
    text = _rendered(
        ObservationEvent(action_id="a1", content=hostile, exit_code=0),
        FinishedEvent(message=hostile),
    )
    # Our styling is SGR only (ESC [ ... m); nothing else may start with ESC or be a control.
    without_sgr = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert not set(without_sgr) & (set(RAW_CONTROL) - {"\n"}), repr(without_sgr)
    assert "\\x1b]0;title\\x07" in without_sgr and "[bold red]x[/]" in without_sgr
    # No line can pass for one of ours (`<seq> ✔ finished`): the imitation keeps its escapes
    # before it, and its continuation lines sit under the gutter.
    lines = without_sgr.splitlines()
    assert not [line for line in lines if re.match(r"\s*9 ✔", line)], lines
    assert [line for line in lines if line.startswith("      │ [bold red]x[/]")], lines


def test_an_echo_redrawn_with_cursor_moves_prints_without_them() -> None:
    """The OpenHands terminal echoes a command with hundreds of cursor moves: printed without
    them (they were a wall of escapes), everything else escaped as before."""
    echo = "ls -la \r\n" + "\x1b[A" + "\x1b[C" * 300 + "&& echo done\x1b[K\r\n\x1b]0;t\x07ok"
    text = re.sub(r"\x1b\[[0-9;]*m", "", _rendered(ObservationEvent(action_id="a", content=echo)))
    assert "\\x1b[C" not in text and "\\x1b[A" not in text and "\\x1b[K" not in text, text
    assert "&& echo done" in text and "\\x1b]0;t\\x07ok" in text
    assert len(text) < 300, text
