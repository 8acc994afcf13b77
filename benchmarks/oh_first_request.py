"""The OpenHands bench's scripted model, stamping each request the gateway hands it.

Imported by the gateway (``script = "oh_first_request:stamped_progress"``) inside the measured
``synthorg run`` process and inside the bench's own in-process gateway, so it stays tiny: one
wall-clock line per model request, appended to ``$OH_BENCH_STAMPS``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from synthorg.engine.openhands.scripts import openhands_progress_script
from synthorg.gateway.scripted import ScriptedModel, ScriptedTurn
from synthorg.gateway.wire import ChatMessage


def stamped_progress() -> ScriptedModel:
    """``openhands_progress_script($OH_BENCH_TURNS)`` that records when each request arrived."""
    script = openhands_progress_script(int(os.environ.get("OH_BENCH_TURNS", "3")))

    def model(
        messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> ScriptedTurn:
        with open(os.environ["OH_BENCH_STAMPS"], "a") as out:  # read per call: per-run file
            out.write(f"{time.time()}\n")
        return script(messages, tools)

    return model
