"""The statistics against scipy/statsmodels and a reference bootstrap, the task as the unit,
and the promotion rule's edges (issue 34, finding 3)."""

from __future__ import annotations

import random
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize
from scipy import stats as scipy_stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint

from synthorg.domain import Complexity, Task
from synthorg.engine import EngineConfig
from synthorg.engine.selection import select_loop_type
from synthorg.eval.compare import compare, summarise
from synthorg.eval.promotion import describe, new_routing, propose, routing
from synthorg.eval.results import TaskResult
from synthorg.eval.stats import (
    Z_95,
    mcnemar_exact,
    min_discordant_pairs,
    min_tasks_for_non_inferiority,
    paired_bootstrap,
    tango_interval,
    wilson_interval,
)


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_scipys_exact_binomial_test(b: int, c: int) -> None:
    expected = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    table = [[3, b], [c, 4]]
    assert mcnemar_exact(b, c) == pytest.approx(
        min(1.0, sm_mcnemar(table, exact=True).pvalue), rel=1e-9, abs=1e-12
    )


def _reference_tango(b: float, c: float, n: int) -> tuple[float, float]:
    """Tango's score interval computed independently: the constrained multinomial MLE by
    scipy's optimiser, the bounds by scipy's root finder."""
    rest = n - b - c

    def score(delta: float) -> float:
        low, high = max(0.0, -delta), (1 - delta) / 2

        def nll(p_a: float) -> float:
            p_b, p_rest = p_a + delta, 1 - 2 * p_a - delta
            terms = [(b, p_a), (c, p_b), (rest, p_rest)]
            return -sum(k * np.log(max(p, 1e-300)) for k, p in terms if k > 0)

        p_a = optimize.minimize_scalar(
            nll, bounds=(low, high), method="bounded", options={"xatol": 1e-13}
        ).x
        variance = n * (2 * p_a + delta - delta**2)
        return float((c - b - n * delta) / np.sqrt(variance))

    estimate = (c - b) / n
    eps = 1e-9
    lo = (
        -1.0
        if score(-1 + eps) <= Z_95
        else optimize.brentq(lambda d: score(d) - Z_95, -1 + eps, estimate - eps, xtol=1e-12)
    )
    hi = (
        1.0
        if score(1 - eps) >= -Z_95
        else optimize.brentq(lambda d: score(d) + Z_95, estimate + eps, 1 - eps, xtol=1e-12)
    )
    return lo, hi


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
@settings(max_examples=40, deadline=None)
def test_tango_interval_matches_an_independent_scipy_computation(pair: tuple[int, int]) -> None:
    n, discordant = pair
    for b in sorted({0, discordant // 3, discordant}):
        c = discordant - b
        ours = tango_interval(b, c, n)
        low, high = _reference_tango(b, c, n)
        assert ours.estimate == pytest.approx((c - b) / n)
        assert ours.low == pytest.approx(low, abs=2e-5)
        assert ours.high == pytest.approx(high, abs=2e-5)


def test_tango_is_not_degenerate_with_no_discordant_task() -> None:
    z2 = Z_95**2
    six = tango_interval(0, 0, 6)
    assert six.low == pytest.approx(-z2 / (6 + z2)) == pytest.approx(-0.3903, abs=1e-4)
    assert six.high == pytest.approx(z2 / (6 + z2))
    assert min_tasks_for_non_inferiority(0.05) == 73
    assert tango_interval(0, 0, 73).low > -0.05 >= tango_interval(0, 0, 72).low


@given(st.integers(0, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_matches_scipy(pair: tuple[int, int]) -> None:
    k, n = pair
    if n == 0:
        assert wilson_interval(k, n) == (0.0, 1.0)
        return
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = wilson_interval(k, n)
    assert low == pytest.approx(ci.low, abs=1e-9)
    assert high == pytest.approx(ci.high, abs=1e-9)


def test_six_discordant_pairs_is_the_least_that_can_be_significant() -> None:
    assert min_discordant_pairs() == 6
    assert mcnemar_exact(0, 6) < 0.05 <= mcnemar_exact(0, 5)


def test_bootstrap_matches_a_reference_percentile_bootstrap() -> None:
    rng = random.Random(7)
    diffs = [rng.gauss(0.3, 1.0) for _ in range(40)]
    ours = paired_bootstrap(diffs, resamples=20_000, seed=1)
    reference = scipy_stats.bootstrap(
        (diffs,),
        lambda x: sum(x) / len(x),
        vectorized=False,
        method="percentile",
        n_resamples=20_000,
        random_state=3,
    ).confidence_interval
    assert ours.estimate == pytest.approx(sum(diffs) / len(diffs))
    assert ours.low == pytest.approx(reference.low, abs=0.03)
    assert ours.high == pytest.approx(reference.high, abs=0.03)


def _results(
    arm: str,
    outcomes: list[bool],
    cost: str,
    complexity: Complexity,
    repeat: int = 0,
) -> list[TaskResult]:
    return [
        TaskResult(
            task_id=f"t{i}",
            arm=arm,
            repeat=repeat,
            complexity=complexity,
            conversation_id=f"c-{arm}-{i}-{repeat}",
            resolved=ok,
            termination_reason="completed",
            cost_usd=Decimal(cost),
            turns=3,
            wall_s=1.0,
        )
        for i, ok in enumerate(outcomes)
    ]


def test_repeats_are_not_independent_evidence() -> None:
    # A deterministic model, 6 tasks, 3 repeats; plan_execute better on only 2 tasks.
    a = [False, False, True, True, True, True]
    b = [True, True, True, True, True, True]
    results = []
    for repeat in range(3):
        results += _results("react", a, "0.02", Complexity.MODERATE, repeat)
        results += _results("plan_execute", b, "0.02", Complexity.MODERATE, repeat)
    cmp = compare(results, "react", "plan_execute")
    assert (cmp.tasks, cmp.only_incumbent, cmp.only_candidate) == (6, 0, 2)
    assert cmp.p_value == pytest.approx(scipy_stats.binomtest(2, 2, 0.5).pvalue) == 0.5
    assert not cmp.promote
    summary = summarise(results, "react")
    low, high = proportion_confint(4, 6, alpha=0.05, method="wilson")
    assert (summary.tasks, summary.rate) == (6, pytest.approx(4 / 6))
    assert (summary.rate_low, summary.rate_high) == (pytest.approx(low), pytest.approx(high))


def test_better_candidate_is_promoted_and_too_small_is_not() -> None:
    engine = EngineConfig(default_loop_type="hybrid")  # selection off: everything runs hybrid
    results = _results("hybrid", [False] * 8, "0.02", Complexity.MODERATE)
    results += _results("react", [True] * 7 + [False], "0.02", Complexity.MODERATE)
    results += _results("hybrid", [False] * 3, "0.02", Complexity.SIMPLE)
    results += _results("react", [True] * 3, "0.02", Complexity.SIMPLE)
    by = {p.complexity: p for p in propose(results, engine)}
    assert by[Complexity.MODERATE].chosen == "react"
    assert "p = 0.0156" in by[Complexity.MODERATE].reason
    assert not by[Complexity.SIMPLE].changes  # 3 tasks: too small
    assert "too small to decide" in by[Complexity.SIMPLE].reason


def test_cheaper_needs_evidence_of_not_worse_not_the_absence_of_discordant_tasks() -> None:
    same = [True, True, False, True, True, False, True, True, True, False]
    a = _results("hybrid", same, "0.050", Complexity.MODERATE)
    b = _results("react", same, "0.010", Complexity.MODERATE)
    ten = compare(a + b, "hybrid", "react")
    assert ten.resolve_diff is not None and ten.resolve_diff.low < -0.05
    assert not ten.promote  # 0 of 10 discordant allows react to be 0.28 worse
    assert "needs at least 73 tasks" in ten.reason()
    many = same * 8
    wide = compare(
        _results("hybrid", many, "0.050", Complexity.MODERATE)
        + _results("react", many, "0.010", Complexity.MODERATE),
        "hybrid",
        "react",
    )
    assert wide.tasks == 80 and wide.not_worse_and_cheaper and wide.promote
    worse = _results("react", [False] * 10, "0.001", Complexity.MODERATE)
    assert not compare(a + worse, "hybrid", "react").promote
    tiny = compare(a[:5] + b[:5], "hybrid", "react")
    assert tiny.too_small and not tiny.promote


def test_the_incumbent_is_what_routing_runs_today() -> None:
    off = EngineConfig()  # auto-selection off: every complexity runs react
    assert routing(off)[Complexity.MODERATE] == "react"
    results = _results("hybrid", [False] * 8, "0.02", Complexity.MODERATE)
    results += _results("react", [False] * 8, "0.02", Complexity.MODERATE)
    (proposal,) = propose(results, off)
    assert proposal.incumbent == "react"


def test_promote_changes_only_the_complexities_it_has_evidence_for() -> None:
    engine = EngineConfig(default_loop_type="hybrid")
    results = _results("hybrid", [False] * 8, "0.02", Complexity.MODERATE)
    results += _results("react", [True] * 8, "0.02", Complexity.MODERATE)
    plan = new_routing(engine, propose(results, engine))
    assert plan.changes == [(Complexity.MODERATE, "hybrid", "react")]
    written = engine.model_copy(
        update={
            "loop_auto_select_enabled": plan.auto_select,
            "loop_complexity_overrides": {Complexity(c): v for c, v in plan.overrides.items()},
        }
    )
    for complexity in Complexity:
        task = Task(id="t", project_id="p", prompt="x", complexity=complexity, repository="/r")
        want = "react" if complexity is Complexity.MODERATE else "hybrid"
        assert select_loop_type(task, written) == want, complexity
    lines = describe(engine, plan)
    assert "routing moderate: hybrid -> react" in lines
    assert any("turns on loop_auto_select_enabled (it was off)" in line for line in lines)
