"""SWE-bench predictions from an eval: one file per arm (and repeat), as the harness reads them.

The harness keys predictions by ``instance_id`` (a later row silently replaces an earlier one),
so a file may hold each instance once: one arm, one repeat. ``model_name_or_path`` names the
arm (and the repeat when there are several): the harness files its logs and reports under it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from synthorg.errors import UsageError
from synthorg.eval.results import TaskResult


def model_name(arm: str, repeat: int, repeats: int) -> str:
    """The prediction's ``model_name_or_path``: the arm, and the repeat when there are several."""
    return f"synthorg-{arm}" if repeats == 1 else f"synthorg-{arm}-r{repeat}"


def predictions(
    results: Sequence[TaskResult], arm: str, repeat: int, repeats: int
) -> list[dict[str, str]]:
    """One arm's predictions of one repeat, one row per instance, sorted by instance id."""
    mine = (r for r in results if r.arm == arm and r.repeat == repeat)
    rows = sorted(mine, key=lambda r: r.task_id)
    return [
        {
            "instance_id": r.task_id,
            "model_name_or_path": model_name(arm, repeat, repeats),
            "model_patch": r.model_patch,
        }
        for r in rows
    ]


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def export(
    results: Sequence[TaskResult],
    arms: Sequence[str],
    repeats: int,
    out: Path,
    *,
    arm: str | None = None,
    repeat: int | None = None,
) -> list[tuple[Path, int]]:
    """Write the predictions; (file, rows) for each written.

    With ``arm``: one file ``out`` (a .jsonl) for that arm and ``repeat`` (default 0). Without:
    ``out`` is a directory with ``<arm>.jsonl`` per arm (``<arm>.r<k>.jsonl`` with repeats).
    """
    if arm is not None:
        if arm not in arms:
            raise UsageError(f"no arm {arm!r} in this eval; its arms: {', '.join(arms)}")
        chosen = 0 if repeat is None else repeat
        if not 0 <= chosen < repeats:
            raise UsageError(f"--repeat must be in 0..{repeats - 1}")
        if out.suffix != ".jsonl":
            raise UsageError("with --arm, --out is the predictions file: give a .jsonl path")
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = predictions(results, arm, chosen, repeats)
        _write(out, rows)
        return [(out, len(rows))]
    if out.suffix == ".jsonl":
        raise UsageError(
            "one file holds one arm's predictions (the harness keys them by instance_id): give "
            "--arm ARM, or a directory for one file per arm"
        )
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in arms:
        for k in range(repeats) if repeat is None else [repeat]:
            stem = name.replace("/", "__") + ("" if repeats == 1 else f".r{k}")
            rows = predictions(results, name, k, repeats)
            _write(out / f"{stem}.jsonl", rows)
            written.append((out / f"{stem}.jsonl", len(rows)))
    return written
