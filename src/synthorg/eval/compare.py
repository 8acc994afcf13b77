"""Paired comparison of two arms over the same tasks, and the promotion rule that reads it.

The unit is the task: each arm's repeats of a task are averaged first, so repeats never count
as independent evidence. The rule, stated once (docs/eval.md repeats it): promote candidate B
over incumbent A for a group of tasks when
  1. B resolves more: the exact sign (McNemar) test over tasks gives p < 0.05 with B better
     on more tasks; or
  2. B is not worse and cheaper: Tango's 95% score interval of (resolve_B - resolve_A) over
     tasks lies above -margin (which takes at least ``min_tasks_for_non_inferiority`` tasks),
     and the 95% paired-bootstrap CI of (cost_B - cost_A) lies below zero.
A group with fewer tasks than the sign test needs to ever reach p < 0.05 (6) is too small:
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
    min_tasks_for_non_inferiority,
    paired_bootstrap,
    tango_interval,
    wilson_interval,
)

DEFAULT_MARGIN = 0.05
"""How much lower a cheaper candidate's resolve rate may be (non-inferiority margin)."""


@dataclass(frozen=True)
class ArmSummary:
    """One arm over one group: resolve rate over tasks (repeats averaged first) with its 95%
    Wilson interval over tasks, mean costs per run."""

    arm: str
    runs: int
    resolved: int
    tasks: int
    rate: float
    rate_low: float
    rate_high: float
    mean_cost: float
    mean_turns: float
    mean_wall_s: float


@dataclass(frozen=True)
class Comparison:
    """A (incumbent) vs B (candidate) over the tasks both ran, repeats averaged per task."""

    group: str
    incumbent: str
    candidate: str
    pairs: int
    tasks: int
    only_incumbent: int
    """Tasks on which A resolved more often than B."""
    only_candidate: int
    """Tasks on which B resolved more often than A."""
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
    def non_inferiority_tasks(self) -> int:
        """The fewest tasks with which rule 2 can hold at this margin."""
        return min_tasks_for_non_inferiority(self.margin) if self.margin > 0 else 10**9

    @property
    def better(self) -> bool:
        return self.p_value < ALPHA and self.only_candidate > self.only_incumbent

    @property
    def not_worse_and_cheaper(self) -> bool:
        if self.resolve_diff is None or self.cost_diff is None:
            return False
        return (
            self.tasks >= self.non_inferiority_tasks
            and self.resolve_diff.low > -self.margin
            and self.cost_diff.high < 0
        )

    @property
    def promote(self) -> bool:
        return not self.too_small and (self.better or self.not_worse_and_cheaper)

    def reason(self) -> str:
        """The decision in one sentence, with the figures it rests on."""
        if self.too_small:
            return (
                f"too small to decide: {self.tasks} paired task(s); the exact sign test cannot "
                f"reach p < {ALPHA} with fewer than {min_discordant_pairs(ALPHA)}"
            )
        if self.better:
            return (
                f"{self.candidate} resolves more ({self.only_candidate} vs {self.only_incumbent} "
                f"tasks of {self.tasks}, exact sign (McNemar) test p = {self.p_value:.4f})"
            )
        if self.not_worse_and_cheaper:
            assert self.resolve_diff is not None and self.cost_diff is not None
            return (
                f"{self.candidate} is not worse (resolve diff 95% CI [{self.resolve_diff.low:+.3f},"
                f" {self.resolve_diff.high:+.3f}] above -{self.margin} over {self.tasks} tasks) "
                f"and cheaper (cost diff CI [{self.cost_diff.low:+.4f}, "
                f"{self.cost_diff.high:+.4f}] USD below 0)"
            )
        return (
            f"keep {self.incumbent}: no significant gain ({self.only_candidate} vs "
            f"{self.only_incumbent} tasks of {self.tasks}, p = {self.p_value:.4f}) and not shown "
            f"cheaper without being worse{self._rule_two_gap()}"
        )

    def _rule_two_gap(self) -> str:
        if self.tasks < self.non_inferiority_tasks:
            return (
                f" (non-inferiority within {self.margin} needs at least "
                f"{self.non_inferiority_tasks} tasks)"
            )
        if self.resolve_diff is not None and self.resolve_diff.low <= -self.margin:
            return f" (resolve diff CI reaches {self.resolve_diff.low:+.3f})"
        return ""


def _per_task(results: Iterable[TaskResult], arm: str) -> dict[str, list[TaskResult]]:
    runs: dict[str, list[TaskResult]] = defaultdict(list)
    for result in results:
        if result.arm == arm:
            runs[result.task_id].append(result)
    return runs


def _rate(runs: Sequence[TaskResult]) -> float:
    return sum(r.resolved for r in runs) / len(runs)


def summarise(results: Iterable[TaskResult], arm: str) -> ArmSummary:
    """One arm's figures over ``results``."""
    mine = [r for r in results if r.arm == arm]
    n = len(mine)
    per_task = [_rate(runs) for runs in _per_task(mine, arm).values()]
    low, high = wilson_interval(sum(per_task), len(per_task))
    return ArmSummary(
        arm=arm,
        runs=n,
        resolved=sum(r.resolved for r in mine),
        tasks=len(per_task),
        rate=sum(per_task) / len(per_task) if per_task else 0.0,
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
    """Pair the two arms by task, each arm's repeats of a task averaged first; tasks either
    arm lacks are left out."""
    a, b = _per_task(results, incumbent), _per_task(results, candidate)
    tasks = sorted(a.keys() & b.keys())
    rates = [(_rate(a[t]), _rate(b[t])) for t in tasks]
    only_a = sum(ra > rb for ra, rb in rates)
    only_b = sum(rb > ra for ra, rb in rates)

    def diff(metric: str) -> Interval | None:
        if not tasks:
            return None
        values = [_mean(b[t], metric) - _mean(a[t], metric) for t in tasks]
        return paired_bootstrap(values, seed=seed)

    return Comparison(
        group=group,
        incumbent=incumbent,
        candidate=candidate,
        pairs=sum(min(len(a[t]), len(b[t])) for t in tasks),
        tasks=len(tasks),
        only_incumbent=only_a,
        only_candidate=only_b,
        p_value=mcnemar_exact(only_a, only_b),
        resolve_diff=(
            tango_interval(
                sum(max(0.0, ra - rb) for ra, rb in rates),
                sum(max(0.0, rb - ra) for ra, rb in rates),
                len(tasks),
            )
            if tasks
            else None
        ),
        cost_diff=diff("cost"),
        turns_diff=diff("turns"),
        wall_diff=diff("wall"),
        margin=margin,
    )


def _mean(runs: Sequence[TaskResult], name: str) -> float:
    return sum(_metric(r, name) for r in runs) / len(runs)


def _metric(result: TaskResult, name: str) -> float:
    if name == "cost":
        return float(result.cost_usd)
    if name == "turns":
        return float(result.turns)
    return result.wall_s
