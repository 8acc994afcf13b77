"""The git red team's scripted model: run the planned shell commands one by one, then finish.

Importable as ``tests.sandbox.redteam_git_scripts:planned_commands``. A test registers a plan
(its commands) under a token it puts in the task prompt; the model finds the token in the user
messages and issues each command through the terminal tool. A prompt naming no registered
plan fails loudly: a script that ran out must never look like a finished run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

PLANS: dict[str, list[str]] = {}
"""Commands per plan token (the test fills it in; the gateway runs in the same process)."""

_TOKEN = re.compile(r"PLAN:([0-9a-f]{16})")


def planned_commands(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """The next command of the plan named in the task, or finish when all have run."""
    # Any user message: with host root inside (the opt-in), a sandbox warning comes first.
    prompt = "\n".join(m.text() for m in messages if m.role == "user")
    found = _TOKEN.search(prompt)
    if found is None or found.group(1) not in PLANS:
        raise AssertionError(f"no plan registered for this task: {prompt[:200]!r}")
    plan = PLANS[found.group(1)]
    done = sum(1 for s in steps_of(messages) if s.name == "terminal" and s.result is not None)
    if done < len(plan):
        return ScriptedTurn.call("terminal", f"Step {done + 1}.", command=plan[done])
    return ScriptedTurn.call("finish", message=f"ran {len(plan)} commands")
