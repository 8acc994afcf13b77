"""What every fault test of a run on Temporal asserts about its end: the truth, once."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

from synthorg.store import open_store
from tests.faults.harness import World, branch_tests_pass, check_log

BUDGET_USD = Decimal("1")
"""The ceiling the fault runs are started with (``--budget``)."""

PRICES = "".join(
    f"[gateway.prices.{model}]\ninput_per_mtok_usd = 3\noutput_per_mtok_usd = 15\n"
    for model in ("marked", "frozen", "slow")
)
"""The fault runs' models cost something, so a spend over the ceiling would show."""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


async def assert_landed_once(
    world: World, conversation: str, repo: Path, *, marks: dict[str, int]
) -> None:
    """FINISHED with a sound log (contiguous seqs, each tool call answered once), exactly one
    landed commit whose tree passes the tests, each mark file holding its expected number of
    lines (a tool call that ran twice shows), and the spend of every run within the ceiling."""
    await check_log(world, conversation)
    branch = f"synthorg/{conversation}"
    assert _git(repo, "rev-list", "--count", f"main..{branch}").strip() == "1"
    branch_tests_pass(repo, conversation)
    for name, count in marks.items():
        shown = subprocess.run(
            ["git", "-C", str(repo), "show", f"{branch}:{name}"], capture_output=True, text=True
        )
        lines = shown.stdout.splitlines() if shown.returncode == 0 else []
        assert len(lines) == count, (name, shown.stdout, shown.stderr)
    store = await open_store(world.store_url)
    try:
        rows = await store.executions_of(conversation)
    finally:
        await store.close()
    spent = sum((row.cost_usd for row in rows), Decimal(0))
    assert Decimal(0) < spent <= BUDGET_USD, rows
