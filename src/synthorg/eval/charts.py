"""Small inline SVG charts for the eval report: grouped bars with intervals, a labelled scatter.

Hand-drawn rather than plotly: plotly's inlined JavaScript alone is ~4.5 MB, and the report
must stay self-contained (no network to view it) and under 1 MB. Every value is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
_W, _H, _LEFT, _BOTTOM, _TOP = 760, 300, 56, 40, 30


@dataclass(frozen=True)
class Bars:
    """One series of a grouped bar chart: a value per category, with its interval."""

    name: str
    values: Sequence[float]
    lows: Sequence[float]
    highs: Sequence[float]


@dataclass(frozen=True)
class Points:
    """One series of a scatter: (x, y) per point, each with a label."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    labels: Sequence[str]


def _frame(title: str, y_label: str, body: list[str], legend: Sequence[str]) -> str:
    keys = [
        f"<rect x='{_LEFT + 10 + 130 * i}' y='8' width='10' height='10' fill='{_colour(i)}'/>"
        f"<text x='{_LEFT + 24 + 130 * i}' y='17' font-size='11'>{escape(name)}</text>"
        for i, name in enumerate(legend)
    ]
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {_W} {_H}' width='{_W}' "
        f"height='{_H}' role='img' aria-label='{escape(title)}'>"
        f"<text x='12' y='{_H / 2}' font-size='11' transform='rotate(-90 12 {_H / 2})'>"
        f"{escape(y_label)}</text>{''.join(keys)}{''.join(body)}</svg></figure>"
    )


def _colour(index: int) -> str:
    return _COLOURS[index % len(_COLOURS)]


def _y(value: float, top: float) -> float:
    span = _H - _BOTTOM - _TOP
    return _H - _BOTTOM - span * (value / top if top else 0.0)


def _axis(top: float, fmt: str) -> list[str]:
    lines = [
        f"<line x1='{_LEFT}' y1='{_H - _BOTTOM}' x2='{_W - 10}' y2='{_H - _BOTTOM}' stroke='#333'/>"
    ]
    for step in range(5):
        value = top * step / 4
        y = _y(value, top)
        lines.append(
            f"<line x1='{_LEFT}' y1='{y:.1f}' x2='{_W - 10}' y2='{y:.1f}' stroke='#ddd'/>"
            f"<text x='{_LEFT - 6}' y='{y + 4:.1f}' font-size='10' text-anchor='end'>"
            f"{value:{fmt}}</text>"
        )
    return lines


def bar_chart(title: str, y_label: str, categories: Sequence[str], series: Sequence[Bars]) -> str:
    """Grouped bars on a 0..1 axis, each with its interval drawn as a whisker."""
    body = _axis(1.0, ".2f")
    slot = (_W - _LEFT - 20) / max(1, len(categories))
    width = slot * 0.8 / max(1, len(series))
    for c, category in enumerate(categories):
        x0 = _LEFT + 10 + c * slot
        body.append(
            f"<text x='{x0 + slot * 0.4:.1f}' y='{_H - _BOTTOM + 16}' font-size='11' "
            f"text-anchor='middle'>{escape(category)}</text>"
        )
        for s, bars in enumerate(series):
            x = x0 + s * width
            value, low, high = bars.values[c], bars.lows[c], bars.highs[c]
            mid = x + width / 2
            body.append(
                f"<rect x='{x:.1f}' y='{_y(value, 1.0):.1f}' width='{width - 2:.1f}' "
                f"height='{_y(0, 1.0) - _y(value, 1.0):.1f}' fill='{_colour(s)}'>"
                f"<title>{escape(bars.name)} {escape(category)}: {value:.2f} "
                f"[{low:.2f}, {high:.2f}]</title></rect>"
                f"<line x1='{mid:.1f}' y1='{_y(low, 1.0):.1f}' x2='{mid:.1f}' "
                f"y2='{_y(high, 1.0):.1f}' stroke='#000'/>"
            )
    return _frame(title, y_label, body, [b.name for b in series])


def scatter(title: str, x_label: str, y_label: str, series: Sequence[Points]) -> str:
    """Points on a 0..max(x) by 0..1 plane, each labelled."""
    top_x = max((x for p in series for x in p.xs), default=0.0) or 1.0
    body = _axis(1.0, ".2f")
    body.append(
        f"<text x='{_W / 2}' y='{_H - 6}' font-size='11' text-anchor='middle'>"
        f"{escape(x_label)} (0 .. {top_x:.4g})</text>"
    )
    for s, points in enumerate(series):
        for x, y, label in zip(points.xs, points.ys, points.labels, strict=True):
            px = _LEFT + 10 + (_W - _LEFT - 40) * x / top_x
            body.append(
                f"<circle cx='{px:.1f}' cy='{_y(y, 1.0):.1f}' r='5' fill='{_colour(s)}'>"
                f"<title>{escape(points.name)} {escape(label)}: {x:.4f}, {y:.2f}</title></circle>"
                f"<text x='{px + 7:.1f}' y='{_y(y, 1.0) - 6:.1f}' font-size='10'>"
                f"{escape(label)}</text>"
            )
    return _frame(title, y_label, body, [p.name for p in series])
