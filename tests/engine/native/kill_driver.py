"""Runs a react loop in this process, to be SIGKILLed by a test.

Usage: python kill_driver.py TMP_DIR TOTAL [MODE]. Prints the conversation id, then runs.
MODE "progress" (default) writes TOTAL lines; "stall" stalls at line 3; "confirm" waits for a
decision on its first command.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from native.harness import harness
from native.resume_scripts import ask_then_finish, stall_at_three

from synthorg.domain import ConfirmationPolicy
from synthorg.engine.native.scripts import progress_script


async def main(tmp: Path, total: int, mode: str) -> None:
    script = {
        "progress": progress_script(total, pause_s=0.2),
        "stall": stall_at_three(),
        "confirm": ask_then_finish,
    }[mode]
    policy = ConfirmationPolicy.ALWAYS if mode == "confirm" else ConfirmationPolicy.NEVER
    async with harness(tmp) as h:
        run = await h.new_run(script, max_turns=100, policy=policy)
        print(run.context.conversation_id, flush=True)
        async with h.toolbox(run.context.conversation_id) as toolbox:
            await h.execute(run, toolbox)


if __name__ == "__main__":
    mode = sys.argv[3] if len(sys.argv) > 3 else "progress"
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), mode))
