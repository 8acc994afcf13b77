"""Paired comparison of two arms over the same tasks, and the promotion rule that reads it.

The rule, stated once (docs/eval.md repeats it): promote candidate B over incumbent A for a
group of tasks when
  1. B resolves more: McNemar's exact test on the paired outcomes gives p < 0.05 with B
     winning more discordant pairs; or
  2. B is not worse and cheaper: the 95% paired-bootstrap CI of (resolve_B - resolve_A)
     lies above -margin, and the 95% CI of (cost_B - cost_A) lies below zero.
A group with fewer paired tasks than McNemar needs to ever reach p < 0.05 (6) is too small:
no decision is made, whatever the point estimates say.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from synthorg.eval.results import TaskResult
from synthorg.eval.stats import (
    ALPHA,
    Interval,
    mcnemar_exact,
    min_discordant_pairs,
    paired_bootstrap,
    wilson_interval,
)

DEFAULT_MARGIN = 0.05
"""How much lower a cheaper candidate's resolve rate may be (non-inferiority margin)."""


@dataclass(frozen=True)
class ArmSummary:
    """One arm over one group: resolve rate with its 95% Wilson interval, mean costs."""

    arm: str
    runs: int
    resolved: int
    rate_low: float
    rate_high: float
    mean_cost: float
    mean_turns: float
    mean_wall_s: float

    @property
    def rate(self) -> float:
        return self.resolved / self.runs if self.runs else 0.0


@dataclass(frozen=True)
class Comparison:
    """A (incumbent) vs B (candidate) over the tasks both ran, paired by task and repeat."""

    group: str
    incumbent: str
    candidate: str
    pairs: int
    tasks: int
    only_incumbent: int
    only_candidate: int
    p_value: float
    resolve_diff: Interval | None
    cost_diff: Interval | None
    turns_diff: Interval | None
    wall_diff: Interval | None
    margin: float

    @property
    def too_small(self) -> bool:
        return self.tasks < min_discordant_pairs(ALPHA)

    @property
    def better(self) -> bool:
        return self.p_value < ALPHA and self.only_candidate > self.only_incumbent

    @property
    def not_worse_and_cheaper(self) -> bool:
        if self.resolve_diff is None or self.cost_diff is None:
            return False
        return self.resolve_diff.low > -self.margin and self.cost_diff.high < 0

    @property
    def promote(self) -> bool:
        return not self.too_small and (self.better or self.not_worse_and_cheaper)

    def reason(self) -> str:
        """The decision in one sentence, with the figures it rests on."""
        if self.too_small:
            return (
                f"too small to decide: {self.tasks} paired task(s); McNemar's exact test cannot "
                f"reach p < {ALPHA} with fewer than {min_discordant_pairs(ALPHA)}"
            )
        if self.better:
            return (
                f"{self.candidate} resolves more ({self.only_candidate} vs {self.only_incumbent} "
                f"discordant pairs, McNemar p = {self.p_value:.4f})"
            )
        if self.not_worse_and_cheaper:
            assert self.resolve_diff is not None and self.cost_diff is not None
            return (
                f"{self.candidate} is not worse (resolve diff CI [{self.resolve_diff.low:+.3f}, "
                f"{self.resolve_diff.high:+.3f}] above -{self.margin}) and cheaper (cost diff CI "
                f"[{self.cost_diff.low:+.4f}, {self.cost_diff.high:+.4f}] USD below 0)"
            )
        return (
            f"keep {self.incumbent}: no significant gain (McNemar p = {self.p_value:.4f}) and "
            "not shown to be cheaper without being worse"
        )


def summarise(results: Iterable[TaskResult], arm: str) -> ArmSummary:
    """One arm's figures over ``results``."""
    mine = [r for r in results if r.arm == arm]
    n = len(mine)
    resolved = sum(r.resolved for r in mine)
    low, high = wilson_interval(resolved, n)
    return ArmSummary(
        arm=arm,
        runs=n,
        resolved=resolved,
        rate_low=low,
        rate_high=high,
        mean_cost=sum(float(r.cost_usd) for r in mine) / n if n else 0.0,
        mean_turns=sum(r.turns for r in mine) / n if n else 0.0,
        mean_wall_s=sum(r.wall_s for r in mine) / n if n else 0.0,
    )


def compare(
    results: Sequence[TaskResult],
    incumbent: str,
    candidate: str,
    *,
    group: str = "overall",
    margin: float = DEFAULT_MARGIN,
    seed: int = 0,
) -> Comparison:
    """Pair the two arms' results by (task, repeat); tasks either arm lacks are left out."""
    by_arm: dict[str, dict[tuple[str, int], TaskResult]] = defaultdict(dict)
    for result in results:
        by_arm[result.arm][(result.task_id, result.repeat)] = result
    a, b = by_arm[incumbent], by_arm[candidate]
    keys = sorted(a.keys() & b.keys())
    only_a = sum(a[k].resolved and not b[k].resolved for k in keys)
    only_b = sum(b[k].resolved and not a[k].resolved for k in keys)
    # Repeats are averaged per task before bootstrapping: tasks are the independent units.
    per_task: dict[str, list[tuple[TaskResult, TaskResult]]] = defaultdict(list)
    for key in keys:
        per_task[key[0]].append((a[key], b[key]))

    def diff(metric: str) -> Interval | None:
        if not per_task:
            return None
        values = [
            sum(_metric(rb, metric) - _metric(ra, metric) for ra, rb in pairs) / len(pairs)
            for pairs in per_task.values()
        ]
        return paired_bootstrap(values, seed=seed)

    return Comparison(
        group=group,
        incumbent=incumbent,
        candidate=candidate,
        pairs=len(keys),
        tasks=len(per_task),
        only_incumbent=only_a,
        only_candidate=only_b,
        p_value=mcnemar_exact(only_a, only_b),
        resolve_diff=diff("resolved"),
        cost_diff=diff("cost"),
        turns_diff=diff("turns"),
        wall_diff=diff("wall"),
        margin=margin,
    )


def _metric(result: TaskResult, name: str) -> float:
    if name == "resolved":
        return 1.0 if result.resolved else 0.0
    if name == "cost":
        return float(result.cost_usd)
    if name == "turns":
        return float(result.turns)
    return result.wall_s
