"""Scripted models for the CLI tests (importable as ``tests.cli.scripts``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from synthorg.engine.native.scripts import progress_script, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

Tools = Sequence[Mapping[str, Any]] | None

# What a hostile command prints: a window title (OSC 0), a clipboard write (OSC 52), erase
# line + carriage return, colours, a C1 CSI, and a line that imitates ours.
HOSTILE_OUTPUT = (
    r"\033]0;pwned-title\007"
    r"\033]52;c;ZXZpbCBjbGlwYm9hcmQ=\007"
    r"\033[2K\r\033[1;32m    9 ✔ finished all good\033[0m\n"
    r"\302\233"
    r"31mc1-csi\n"
    r"\033[5A\033[?25l"
)


def hostile_output(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Writes a file, prints escape sequences, then finishes with escapes in its message."""
    done = [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]
    if not done:
        return ScriptedTurn.call(
            "terminal", command=f"echo 1 > progress.txt && printf '{HOSTILE_OUTPUT}'"
        )
    return ScriptedTurn.call("finish", message="done \x1b]0;finish-title\x07 \x1b[2J")


def hidden_write(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Writes through `find -fprintf` (a write hidden behind a read-only tool), then finishes."""
    done = [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]
    if not done:
        return ScriptedTurn.call(
            "terminal", command="find . -maxdepth 1 -name '*.py' -fprintf found.txt '%p\\n'"
        )
    if len(done) == 1:
        return ScriptedTurn.call("terminal", command="echo 1 > progress.txt")
    return ScriptedTurn.call("finish", message="done")


one_step = progress_script(1)
progress_slow = progress_script(6, pause_s=0.3)


PADDED = "echo harmless-looking-step" + " " * 290 + "; touch HIDDEN_TAIL_RAN"
BIDI = "echo ok #\u202e; echo bidi-tail } \u2066rm-asdf; {\u2069"
CONFTEST = "".join(f"# line {n}\n" for n in range(1, 30)) + "import os  # the last line\n"


def approver_must_see(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """A padded command, a command with bidi characters and a file created, then finish."""
    done = [s for s in steps_of(messages) if s.result is not None]
    turns = [
        ScriptedTurn.call("terminal", command=PADDED),
        ScriptedTurn.call("terminal", command=BIDI),
        ScriptedTurn.call("file_editor", command="create", path="conftest.py", file_text=CONFTEST),
    ]
    return turns[len(done)] if len(done) < len(turns) else ScriptedTurn.call("finish", message="ok")
