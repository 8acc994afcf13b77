"""Reports of an evaluation: a markdown summary and a self-contained HTML page (tables, the
decision promote would make with its evidence and power, inline SVG charts)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from synthorg.domain import Complexity
from synthorg.eval.charts import Bars, Points, bar_chart, scatter
from synthorg.eval.compare import Comparison, compare, summarise
from synthorg.eval.promotion import Proposal
from synthorg.eval.results import TaskResult
from synthorg.eval.stats import ALPHA, Interval, mcnemar_exact, wilson_interval


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


def markdown(
    eval_id: str,
    results: Sequence[TaskResult],
    arms: Sequence[str],
    proposals: Sequence[Proposal] = (),
) -> str:
    """The summary as markdown tables, after the decision when one is given."""
    lines = [f"# Eval {eval_id}", ""]
    for p in proposals:
        verb = f"{p.incumbent} -> {p.chosen}" if p.changes else f"keep {p.chosen}"
        lines.append(
            f"- **{p.complexity.value}** (routed to {p.incumbent} today): {verb}: {p.reason}"
        )
        lines += [f"  - power: {power(c)}" for c in p.comparisons]
    lines += [
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


def power(c: Comparison) -> str:
    """What these tasks could show at all: the evidence's power in one sentence."""
    decided = c.only_incumbent + c.only_candidate
    needed = next(
        (
            w
            for w in range(decided + 1)
            if mcnemar_exact(decided - w, w) < ALPHA and w > decided - w
        ),
        None,
    )
    rule_one = (
        f"rule 1 needs {c.candidate} better on at least {needed} of the {decided} decided tasks"
        if needed is not None
        else f"rule 1 cannot hold with {decided} decided task(s) (it needs 6 or more)"
    )
    rule_two = (
        f"rule 2 needs at least {c.non_inferiority_tasks} tasks (margin {c.margin})"
        f"{'' if c.tasks >= c.non_inferiority_tasks else f', has {c.tasks}'}"
    )
    smallest = mcnemar_exact(0, c.tasks) if c.tasks else 1.0
    return (
        f"{c.tasks} tasks: the smallest p they could give is {smallest:.2g}; {rule_one}; {rule_two}"
    )


def _cell(value: object) -> str:
    return f"<td>{escape(str(value))}</td>"


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    header = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def _decision(proposals: Sequence[Proposal], lines: Sequence[str]) -> str:
    rows = []
    for p in proposals:
        evidence = "; ".join(
            f"vs {c.candidate}: {c.only_candidate} vs {c.only_incumbent} tasks, p = "
            f"{c.p_value:.4f}, resolve diff {interval(c.resolve_diff, 3)}, cost diff "
            f"{interval(c.cost_diff, 4)}"
            for c in p.comparisons
        )
        rows.append(
            (
                p.complexity.value,
                p.incumbent,
                f"{p.incumbent} -> {p.chosen}" if p.changes else f"keep {p.chosen}",
                p.reason,
                evidence or "–",
                " | ".join(power(c) for c in p.comparisons) or "–",
            )
        )
    head = ("complexity", "incumbent (routed today)", "promote would", "why", "evidence", "power")
    changes = "".join(f"<li>{escape(line)}</li>" for line in lines) or "<li>nothing changes</li>"
    title = "<h3>What <code>eval promote --apply</code> would write</h3>"
    return f"{_table(head, rows)}{title}<ul>{changes}</ul>"


def html(
    eval_id: str,
    results: Sequence[TaskResult],
    arms: Sequence[str],
    proposals: Sequence[Proposal],
    routing_lines: Sequence[str],
) -> str:
    """One self-contained page: the decision, the tables, and two inline SVG charts."""
    named = groups(results)
    summaries = [(name, arm, summarise(group, arm)) for name, group in named for arm in arms]
    arm_rows = [
        (
            name,
            arm,
            s.tasks,
            s.runs,
            s.resolved,
            f"{s.rate:.2f} ({s.rate_low:.2f}–{s.rate_high:.2f})",
            f"{s.mean_cost:.4f}",
            f"{s.mean_turns:.1f}",
            f"{s.mean_wall_s:.1f}",
        )
        for name, arm, s in summaries
    ]
    cmp_rows = [
        (
            c.group,
            f"{c.incumbent} vs {c.candidate}",
            c.tasks,
            c.pairs,
            c.only_incumbent,
            c.only_candidate,
            f"{c.p_value:.4f}",
            interval(c.resolve_diff, 3),
            interval(c.cost_diff, 4),
            interval(c.turns_diff, 1),
            interval(c.wall_diff, 1),
            c.reason(),
        )
        for c in comparisons(results, arms)
    ]
    parts = [
        "<h2>Decision</h2>",
        _decision(proposals, routing_lines),
        "<h2>Arms</h2>",
        _table(
            (
                "group",
                "arm",
                "tasks",
                "runs",
                "resolved runs",
                "rate over tasks (95% CI)",
                "mean cost USD",
                "mean turns",
                "mean wall s",
            ),
            arm_rows,
        ),
        "<h2>Paired comparisons (A = first arm)</h2>",
        _table(
            (
                "group",
                "A vs B",
                "tasks",
                "paired runs",
                "A better",
                "B better",
                "sign test p",
                "B−A resolve (95% CI)",
                "B−A cost USD",
                "B−A turns",
                "B−A wall s",
                "verdict",
            ),
            cmp_rows,
        ),
        _charts(named, arms),
    ]
    if any(r.repeat > 0 for r in results):
        per_task = [
            (task, arm, f"{won} / {runs}", f"{won / runs:.2f}")
            for (task, arm), (won, runs) in sorted(per_task_rates(results).items())
        ]
        parts += [
            "<h2>Per task over repeats</h2>",
            _table(("task", "arm", "resolved / runs", "rate"), per_task),
        ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Eval {escape(eval_id)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>Eval {escape(eval_id)}</h1>"
        f"{''.join(parts)}</body></html>"
    )


_STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
    "th,td{border:1px solid #ccc;padding:4px 6px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}figure{margin:1em 0}figcaption{font-weight:bold}"
)


def _charts(named: Sequence[tuple[str, list[TaskResult]]], arms: Sequence[str]) -> str:
    names = [name for name, _ in named]
    bars = []
    for arm in arms:
        s = [summarise(group, arm) for _, group in named]
        bars.append(
            Bars(arm, [x.rate for x in s], [x.rate_low for x in s], [x.rate_high for x in s])
        )
    complexities = named[1:] or named
    points = [
        Points(
            arm,
            [summarise(g, arm).mean_cost for _, g in complexities],
            [summarise(g, arm).rate for _, g in complexities],
            [name for name, _ in complexities],
        )
        for arm in arms
    ]
    return (
        "<h2>Charts</h2>"
        + bar_chart("Resolve rate over tasks (95% Wilson CI)", "resolve rate", names, bars)
        + scatter("Cost vs resolve, per complexity", "mean cost (USD)", "resolve rate", points)
    )
