"""Promotion: per complexity, which loop to route to, by the rule in ``compare``; written to config.

The proposal is computed from the eval's verdicts and the routing in force, exactly as
``engine.selection`` chooses (auto-selection off: every complexity runs ``default_loop_type``).
Only the complexities the eval decided change: when auto-selection must be turned on for them,
every other complexity is pinned to the loop it runs today, so the default rules never reach a
complexity the eval did not test. Writing is a separate, explicit step (``--apply``) that edits
only ``[engine]`` of the config file (comments and everything else kept, via tomlkit).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from synthorg.domain import Complexity
from synthorg.engine import EngineConfig
from synthorg.engine.selection import build_auto_loop_config
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
    """The loop each complexity is routed to today, as ``select_loop_type`` picks it."""
    auto = build_auto_loop_config(engine)
    if auto is None:
        return dict.fromkeys(Complexity, engine.default_loop_type)
    return {c: auto.rules.get(c, auto.default_loop_type) for c in Complexity}


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
        incumbent = current[complexity]
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


@dataclass(frozen=True)
class Routing:
    """The engine settings a promotion writes, and the routing they give."""

    auto_select: bool
    overrides: dict[str, str]
    before: dict[Complexity, str]
    after: dict[Complexity, str]

    @property
    def changes(self) -> list[tuple[Complexity, str, str]]:
        """(complexity, loop before, loop after) for every complexity whose loop changes."""
        return [
            (c, self.before[c], self.after[c])
            for c in Complexity
            if self.before[c] != self.after[c]
        ]


def new_routing(engine: EngineConfig, proposals: Sequence[Proposal]) -> Routing:
    """The settings that route each decided complexity to its winner and leave every other
    one where it is (auto-selection turned on only when a change needs it, and then every
    complexity the defaults would move pinned to today's loop)."""
    before = routing(engine)
    after = dict(before)
    for proposal in proposals:
        after[proposal.complexity] = proposal.chosen
    overrides = {c.value: loop for c, loop in engine.loop_complexity_overrides.items()}
    auto = engine.loop_auto_select_enabled or after != before
    if auto:
        defaults = routing(engine.model_copy(update={"loop_auto_select_enabled": True}))
        for complexity in Complexity:
            if defaults[complexity] != after[complexity] or complexity.value in overrides:
                overrides[complexity.value] = after[complexity]
    result = Routing(auto, dict(sorted(overrides.items())), before, after)
    written = engine.model_copy(
        update={
            "loop_auto_select_enabled": auto,
            "loop_complexity_overrides": {Complexity(c): v for c, v in overrides.items()},
        }
    )
    assert routing(written) == after, "a promotion must change only what it decided"
    return result


def describe(engine: EngineConfig, plan: Routing) -> list[str]:
    """Every routing change in words, and the auto-selection switch when it flips."""
    lines = [f"routing {c.value}: {old} -> {new}" for c, old, new in plan.changes]
    if plan.auto_select and not engine.loop_auto_select_enabled:
        pinned = [c.value for c in Complexity if plan.before[c] == plan.after[c]]
        lines.append(
            "turns on loop_auto_select_enabled (it was off)"
            + (f"; pins {', '.join(pinned)} to the loop they run today" if pinned else "")
        )
    kept = [f"{c.value}={plan.after[c]}" for c in Complexity if plan.before[c] == plan.after[c]]
    lines.append(f"unchanged: {', '.join(kept) or 'none'}")
    return lines


def _edited(text: str, plan: Routing) -> str:
    try:
        document = tomlkit.parse(text)
    except Exception as exc:  # tomlkit raises several parse error types
        raise ConfigError(f"the config file is not valid TOML: {exc}") from exc
    engine = document.get("engine")
    if engine is None:
        engine = tomlkit.table()
        document["engine"] = engine
    if plan.auto_select:
        engine["loop_auto_select_enabled"] = True
    table = tomlkit.inline_table()
    table.update(plan.overrides)
    engine["loop_complexity_overrides"] = table
    return tomlkit.dumps(document)


def config_diff(path: Path, plan: Routing) -> str:
    """The unified diff ``apply`` would make to ``path`` (which may not exist yet)."""
    before = path.read_text() if path.exists() else ""
    after = _edited(before, plan)
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=str(path),
            tofile=f"{path} (promoted)",
        )
    )


def apply(path: Path, plan: Routing) -> None:
    """Write the routing into ``path`` atomically (a temp file renamed over it)."""
    before = path.read_text() if path.exists() else ""
    temporary = path.with_name(f".{path.name}.promote")
    temporary.write_text(_edited(before, plan))
    temporary.replace(path)
