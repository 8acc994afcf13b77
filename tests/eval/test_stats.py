"""The statistics against scipy and a reference bootstrap, and the promotion rule's edges."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from synthorg.domain import Complexity
from synthorg.engine import EngineConfig
from synthorg.eval.compare import compare
from synthorg.eval.promotion import new_overrides, propose
from synthorg.eval.results import TaskResult
from synthorg.eval.stats import (
    mcnemar_exact,
    min_discordant_pairs,
    paired_bootstrap,
    wilson_interval,
)


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_scipys_exact_binomial_test(b: int, c: int) -> None:
    expected = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-12)


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


def _results(arm: str, outcomes: list[bool], cost: str, complexity: Complexity) -> list[TaskResult]:
    return [
        TaskResult(
            task_id=f"t{i}",
            arm=arm,
            repeat=0,
            complexity=complexity,
            conversation_id=f"c-{arm}-{i}",
            resolved=ok,
            termination_reason="completed",
            cost_usd=Decimal(cost),
            turns=3,
            wall_s=1.0,
        )
        for i, ok in enumerate(outcomes)
    ]


def test_better_candidate_is_promoted_and_too_small_is_not() -> None:
    engine = EngineConfig()  # moderate -> hybrid today
    results = _results("hybrid", [False] * 8, "0.02", Complexity.MODERATE)
    results += _results("react", [True] * 7 + [False], "0.02", Complexity.MODERATE)
    results += _results("hybrid", [False] * 3, "0.02", Complexity.SIMPLE)
    results += _results("react", [True] * 3, "0.02", Complexity.SIMPLE)
    by = {p.complexity: p for p in propose(results, engine)}
    assert by[Complexity.MODERATE].chosen == "react"
    assert "McNemar p = 0.0156" in by[Complexity.MODERATE].reason
    assert not by[Complexity.SIMPLE].changes  # react is the incumbent for simple anyway
    assert new_overrides(engine, list(by.values())) == {"moderate": "react"}


def test_cheaper_and_not_worse_is_promoted_small_and_worse_is_not() -> None:
    same = [True, True, False, True, True, False, True, True, True, False]
    a = _results("hybrid", same, "0.050", Complexity.MODERATE)
    b = _results("react", same, "0.010", Complexity.MODERATE)
    assert compare(a + b, "hybrid", "react").promote
    worse = _results("react", [False] * 10, "0.001", Complexity.MODERATE)
    assert not compare(a + worse, "hybrid", "react").promote
    tiny = compare(a[:5] + b[:5], "hybrid", "react")
    assert tiny.too_small and not tiny.promote
    assert "too small to decide" in tiny.reason()


def test_the_summary_shows_paired_cis_and_per_task_rates_with_repeats() -> None:
    from synthorg.eval.report import markdown

    results = []
    for repeat in range(3):
        for arm, cost, ok in (("hybrid", "0.05", repeat == 0), ("react", "0.01", True)):
            results += [
                r.model_copy(update={"repeat": repeat})
                for r in _results(arm, [ok] * 6, cost, Complexity.MODERATE)
            ]
    text = markdown("ev-x", results, ["hybrid", "react"])
    assert "| overall | hybrid vs react | 18 | 0 | 12 |" in text
    assert "-0.0400 [-0.0400, -0.0400]" in text  # B−A cost, paired by task
    assert "| t0 | hybrid | 1 / 3 | 0.33 (" in text  # per-task rate over the repeats
    assert "| t0 | react | 3 / 3 | 1.00 (" in text
