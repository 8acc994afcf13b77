"""Runs a react loop on the progress script in this process, to be SIGKILLed by a test.

Usage: python kill_driver.py TMP_DIR TOTAL. Prints the conversation id, then runs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from native.harness import harness

from synthorg.engine.native.scripts import progress_script


async def main(tmp: Path, total: int) -> None:
    async with harness(tmp) as h:
        run = await h.new_run(progress_script(total, pause_s=0.2), max_turns=100)
        print(run.context.conversation_id, flush=True)
        async with h.toolbox(run.context.conversation_id) as toolbox:
            await h.execute(run, toolbox)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
