"""Reports of an evaluation: a markdown summary and a self-contained HTML page with plots."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from synthorg.domain import Complexity
from synthorg.eval.compare import Comparison, compare, summarise
from synthorg.eval.results import TaskResult
from synthorg.eval.stats import Interval, wilson_interval


def groups(results: Sequence[TaskResult]) -> list[tuple[str, list[TaskResult]]]:
    """``overall`` then each complexity present, with its results."""
    out = [("overall", list(results))]
    for complexity in Complexity:
        mine = [r for r in results if r.complexity is complexity]
        if mine:
            out.append((complexity.value, mine))
    return out


def comparisons(results: Sequence[TaskResult], arms: Sequence[str]) -> list[Comparison]:
    """The first arm (A) against each other arm, overall and per complexity."""
    if len(arms) < 2:
        return []
    return [
        compare(group, arms[0], arm, group=name)
        for name, group in groups(results)
        for arm in arms[1:]
    ]


def markdown(eval_id: str, results: Sequence[TaskResult], arms: Sequence[str]) -> str:
    """The summary as markdown tables."""
    lines = [
        f"# Eval {eval_id}",
        "",
        "| group | arm | runs | resolved | rate (95% CI) | "
        "mean cost USD | mean turns | mean wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, group in groups(results):
        for arm in arms:
            s = summarise(group, arm)
            lines.append(
                f"| {name} | {arm} | {s.runs} | {s.resolved} | {s.rate:.2f} "
                f"({s.rate_low:.2f}–{s.rate_high:.2f}) | {s.mean_cost:.4f} | "
                f"{s.mean_turns:.1f} | {s.mean_wall_s:.1f} |"
            )
    lines += [
        "",
        "| group | A vs B | pairs | only A | only B | McNemar p | B−A cost USD (95% CI) "
        "| B−A turns (95% CI) | B−A wall s (95% CI) | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons(results, arms):
        lines.append(
            f"| {c.group} | {c.incumbent} vs {c.candidate} | {c.pairs} | {c.only_incumbent} | "
            f"{c.only_candidate} | {c.p_value:.4f} | {interval(c.cost_diff, 4)} | "
            f"{interval(c.turns_diff, 1)} | {interval(c.wall_diff, 1)} | {c.reason()} |"
        )
    if any(r.repeat > 0 for r in results):
        lines += ["", "| task | arm | resolved / runs | rate (95% CI) |", "|---|---|---|---|"]
        for (task, arm), (won, runs) in sorted(per_task_rates(results).items()):
            low, high = wilson_interval(won, runs)
            lines.append(
                f"| {task} | {arm} | {won} / {runs} | {won / runs:.2f} ({low:.2f}–{high:.2f}) |"
            )
    return "\n".join(lines) + "\n"


def interval(value: Interval | None, digits: int) -> str:
    """``+1.23 [+0.50, +2.00]``, or a dash when there was nothing to pair."""
    if value is None:
        return "–"
    return f"{value.estimate:+.{digits}f} [{value.low:+.{digits}f}, {value.high:+.{digits}f}]"


def per_task_rates(results: Sequence[TaskResult]) -> dict[tuple[str, str], tuple[int, int]]:
    """(task, arm) -> (resolved, runs) over the repeats."""
    rates: dict[tuple[str, str], tuple[int, int]] = {}
    for r in results:
        won, runs = rates.get((r.task_id, r.arm), (0, 0))
        rates[(r.task_id, r.arm)] = (won + r.resolved, runs + 1)
    return rates


def html(eval_id: str, results: Sequence[TaskResult], arms: Sequence[str]) -> str:
    """A single HTML file (plotly's JavaScript inlined): rates with CIs, cost vs resolve."""
    import plotly.graph_objects as go  # only the report needs plotly
    from plotly.io import to_html

    names = [name for name, _ in groups(results)]
    rates = go.Figure()
    for arm in arms:
        summaries = [summarise(group, arm) for _, group in groups(results)]
        rates.add_bar(
            name=arm,
            x=names,
            y=[s.rate for s in summaries],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [s.rate_high - s.rate for s in summaries],
                "arrayminus": [s.rate - s.rate_low for s in summaries],
            },
        )
    rates.update_layout(title="Resolve rate (95% Wilson CI)", yaxis_range=[0, 1], barmode="group")
    scatter = go.Figure()
    for arm in arms:
        points = [summarise(group, arm) for _, group in groups(results)[1:]] or [
            summarise(results, arm)
        ]
        scatter.add_scatter(
            name=arm,
            mode="markers+text",
            x=[p.mean_cost for p in points],
            y=[p.rate for p in points],
            text=names[1:] or ["overall"],
            textposition="top center",
        )
    scatter.update_layout(
        title="Cost vs resolve, per complexity",
        xaxis_title="mean cost (USD)",
        yaxis_title="resolve rate",
    )
    parts = [
        to_html(rates, full_html=False, include_plotlyjs=True),
        to_html(scatter, full_html=False, include_plotlyjs=False),
    ]
    table = escape(markdown(eval_id, results, arms))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Eval {escape(eval_id)}</title>"
        "</head><body style='font-family:sans-serif;max-width:1100px;margin:auto'>"
        f"<h1>Eval {escape(eval_id)}</h1>{''.join(parts)}<h2>Tables</h2><pre>{table}</pre>"
        "</body></html>"
    )
