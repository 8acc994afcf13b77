"""What a suite held when its eval was planned: per task and field, a hash, so a resume can
refuse a suite edited since (a check weakened to ``true`` would judge the rest differently)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from synthorg.eval.suite import Suite

Fingerprint = dict[str, dict[str, str]]
"""task id -> field -> the first 16 hex chars of the sha256 of its JSON value."""


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(suite: Suite) -> Fingerprint:
    """Every task's fields (the check's own fields one by one), hashed."""
    prints: Fingerprint = {}
    for task in suite.tasks:
        body = task.model_dump(mode="json")
        check = body.pop("check")
        fields = {name: _digest(value) for name, value in body.items()}
        fields.update({f"check.{name}": _digest(value) for name, value in check.items()})
        prints[task.id] = fields
    return prints


def suite_hash(prints: Mapping[str, Mapping[str, str]]) -> str:
    """One hash of the whole suite's content."""
    return _digest(prints)


def differences(
    planned: Mapping[str, Mapping[str, str]], now: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """What changed, one line per task: added, removed, or the fields whose content differs."""
    lines = [f"task {t}: removed from the suite" for t in sorted(planned.keys() - now.keys())]
    lines += [f"task {t}: added to the suite" for t in sorted(now.keys() - planned.keys())]
    for task in sorted(planned.keys() & now.keys()):
        before, after = planned[task], now[task]
        changed = sorted(f for f in before.keys() | after.keys() if before.get(f) != after.get(f))
        if changed:
            lines.append(f"task {task}: changed {', '.join(changed)}")
    return lines
