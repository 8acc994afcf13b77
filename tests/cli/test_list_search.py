"""``synthorg conversations list --search``: the store's task-text search from the terminal."""

from __future__ import annotations

import subprocess
from pathlib import Path

from synthorg.store import open_store
from tests.server.helpers import seed_conversations

from .cli_support import SYNTHORG, cli_env


async def test_list_search_finds_by_task_text(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = await open_store(str(home / "store.db"))
    try:
        ids = await seed_conversations(store, ["Fix the Flaky Login test", "bump deps"] * 30)
    finally:
        await store.close()
    shown = subprocess.run(
        [*SYNTHORG, "conversations", "list", "--search", "flaky LOGIN", "--limit", "100"],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert sum(cid in shown.stdout for cid in ids[0::2]) == 30
    assert not any(cid in shown.stdout for cid in ids[1::2])
