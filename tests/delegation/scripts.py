"""Scripted models of the delegation tests: the task prompt says what each agent does.

``DELEGATE <json list of sub-tasks>``: call ``delegate`` once, then finish quoting its result
(``DELEGATE_THEN_SPIN``: spin afterwards, until the budget stops it).
``EDIT <json {path, old, new}>``: one str_replace, then finish.
``SPIN``: a new command every turn, never finishes (cancel tests).
``SLOWSED <expr>``: five warm-up commands, then ``sed -i <expr> notes.txt`` (idempotent), finish.
``SPY <data dir>``: tries to read and write every other worktree under the data dir.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

_VERBS = ("DELEGATE", "DELEGATE_THEN_SPIN", "EDIT", "SPIN", "SLOWSED", "SPY")


def _prompt(messages: Sequence[ChatMessage]) -> str:
    # The task prompt; a resumed history may hold system notes (logged first) before it.
    for message in messages:
        if message.role == "user":
            first = (str(message.content or "").splitlines() or [""])[0]
            if first.partition(" ")[0] in _VERBS:
                return first
    raise AssertionError("no task prompt in the conversation")


def delegating(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Acts on the task prompt (see the module docstring)."""
    prompt = _prompt(messages)
    steps = steps_of(messages)
    verb, _, body = prompt.partition(" ")
    if verb in ("DELEGATE", "DELEGATE_THEN_SPIN"):
        # A call the host's death interrupted is repeated (it continues the same children).
        done = [s for s in steps if s.name == "delegate" and _ran(s.result)]
        if not done:
            return ScriptedTurn.call("delegate", tasks=json.loads(body))
        if verb == "DELEGATE_THEN_SPIN":
            return _spin(messages)
        return ScriptedTurn.call("finish", message=done[-1].result or "")
    if verb == "EDIT":
        spec = json.loads(body)
        if not any(s.name == "file_editor" and s.result is not None for s in steps):
            return ScriptedTurn.call(
                "file_editor",
                command="str_replace",
                path=spec["path"],
                old_str=spec["old"],
                new_str=spec["new"],
            )
        return ScriptedTurn.call("finish", message=f"edited {spec['path']}")
    if verb == "SPIN":
        return _spin(messages)
    if verb == "SLOWSED":  # body: a sed expression for notes.txt, after five warm-ups
        warm = [s for s in steps if s.name == "terminal" and "warm" in (s.result or "")]
        if len(warm) < 5:
            return ScriptedTurn.call("terminal", command=f"echo warm {len(warm) + 1}")
        if not any(s.name == "terminal" and "edited" in (s.result or "") for s in steps):
            return ScriptedTurn.call(
                "terminal", command=f"sed -i {shlex.quote(body)} notes.txt && echo edited"
            )
        return ScriptedTurn.call("finish", message="edited notes.txt")
    if verb == "SPY":  # body: the data dir; reach every other worktree under it
        if not any(s.name == "terminal" and s.result is not None for s in steps):
            return ScriptedTurn.call("terminal", command=_spy(body))
        return ScriptedTurn.call("finish", message="looked")
    raise AssertionError(f"unscripted prompt {prompt!r}")


def _spin(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    n = sum(1 for m in messages if m.role == "assistant") + 1
    return ScriptedTurn.call("terminal", command=f"echo spin {n}")


def edit(path: str, old: str, new: str) -> str:
    """The prompt of an EDIT child."""
    return "EDIT " + json.dumps({"path": path, "old": old, "new": new})


def delegate(*tasks: dict[str, object], then_spin: bool = False) -> str:
    """The prompt of a DELEGATE parent (that spins afterwards with ``then_spin``)."""
    verb = "DELEGATE_THEN_SPIN" if then_spin else "DELEGATE"
    return f"{verb} " + json.dumps(list(tasks))


def _spy(home: str) -> str:
    """Read and append to every notes.txt under the data dir's worktrees but our own."""
    return (
        f'for f in {home}/worktrees/*/*/notes.txt; do case "$f" in "$PWD"/*) ;; '
        '*) echo "try $f"; cat "$f" && echo READ; echo pwned >> "$f" && echo WROTE;; esac; done; '
        f"ls {home}/worktrees"
    )


def _ran(result: str | None) -> bool:
    return result is not None and "died while" not in result
