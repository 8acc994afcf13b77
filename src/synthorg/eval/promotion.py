"""Promotion: per complexity, which loop to route to, by the rule in ``compare``; written to config.

The proposal is computed from the eval's verdicts and the routing in force (the default
complexity rules merged with ``engine.loop_complexity_overrides``). Writing it is a separate,
explicit step (``--apply``) that edits only ``[engine]`` of the config file (comments and
everything else kept, via tomlkit), turns auto-selection on, and records who did it and why.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from synthorg.domain import Complexity
from synthorg.engine import EngineConfig
from synthorg.engine.selection import DEFAULT_COMPLEXITY_RULES
from synthorg.errors import ConfigError
from synthorg.eval.compare import DEFAULT_MARGIN, Comparison, compare, summarise
from synthorg.eval.results import TaskResult


@dataclass(frozen=True)
class Proposal:
    """The routing decision for one complexity."""

    complexity: Complexity
    incumbent: str
    chosen: str
    comparisons: tuple[Comparison, ...]
    reason: str

    @property
    def changes(self) -> bool:
        return self.chosen != self.incumbent


def routing(engine: EngineConfig) -> dict[Complexity, str]:
    """The loop each complexity is routed to today."""
    return {**DEFAULT_COMPLEXITY_RULES, **engine.loop_complexity_overrides}


def propose(
    results: Sequence[TaskResult], engine: EngineConfig, *, margin: float = DEFAULT_MARGIN
) -> list[Proposal]:
    """One proposal per complexity present in ``results``."""
    current = routing(engine)
    proposals = []
    for complexity in Complexity:
        group = [r for r in results if r.complexity is complexity]
        if not group:
            continue
        incumbent = current.get(complexity, engine.default_loop_type)
        arms = sorted({r.arm for r in group})
        if incumbent not in arms:
            proposals.append(
                Proposal(
                    complexity,
                    incumbent,
                    incumbent,
                    (),
                    f"keep {incumbent}: it was not an arm of this eval, so nothing was "
                    "compared against it",
                )
            )
            continue
        comparisons = tuple(
            compare(group, incumbent, arm, group=complexity.value, margin=margin)
            for arm in arms
            if arm != incumbent and "@" not in arm  # a model-pinned arm is not a routing
        )
        winners = [c for c in comparisons if c.promote]
        if not winners:
            reason = "; ".join(c.reason() for c in comparisons) or "no other routable arm"
            proposals.append(Proposal(complexity, incumbent, incumbent, comparisons, reason))
            continue
        best = max(
            winners,
            key=lambda c: (
                summarise(group, c.candidate).rate,
                -summarise(group, c.candidate).mean_cost,
            ),
        )
        proposals.append(
            Proposal(complexity, incumbent, best.candidate, comparisons, best.reason())
        )
    return proposals


def _preference(group: Sequence[TaskResult], arm: str) -> tuple[float, float]:
    """Among arms that all beat the incumbent: the best resolve rate, then the cheapest."""
    summary = summarise(group, arm)
    return summary.rate, -summary.mean_cost


def new_overrides(engine: EngineConfig, proposals: Sequence[Proposal]) -> dict[str, str]:
    """``engine.loop_complexity_overrides`` after the proposals (unchanged entries kept)."""
    overrides = {c.value: loop for c, loop in engine.loop_complexity_overrides.items()}
    for proposal in proposals:
        if proposal.changes:
            overrides[proposal.complexity.value] = proposal.chosen
    return dict(sorted(overrides.items()))


def _edited(text: str, overrides: dict[str, str]) -> str:
    try:
        document = tomlkit.parse(text)
    except Exception as exc:  # tomlkit raises several parse error types
        raise ConfigError(f"the config file is not valid TOML: {exc}") from exc
    engine = document.get("engine")
    if engine is None:
        engine = tomlkit.table()
        document["engine"] = engine
    engine["loop_auto_select_enabled"] = True
    table = tomlkit.inline_table()
    table.update(overrides)
    engine["loop_complexity_overrides"] = table
    return tomlkit.dumps(document)


def config_diff(path: Path, overrides: dict[str, str]) -> str:
    """The unified diff ``apply`` would make to ``path`` (which may not exist yet)."""
    before = path.read_text() if path.exists() else ""
    after = _edited(before, overrides)
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=str(path),
            tofile=f"{path} (promoted)",
        )
    )


def apply(path: Path, overrides: dict[str, str]) -> None:
    """Write the overrides into ``path`` atomically (a temp file renamed over it)."""
    before = path.read_text() if path.exists() else ""
    temporary = path.with_name(f".{path.name}.promote")
    temporary.write_text(_edited(before, overrides))
    temporary.replace(path)
