"""The report: real HTML tables, a decision section (incumbent as routed, what promote would
change and why, the evidence and its power), self-contained and under 1 MB (issue 34, finding 6)."""

from __future__ import annotations

from decimal import Decimal
from html import unescape
from html.parser import HTMLParser

from synthorg.domain import Complexity
from synthorg.engine import EngineConfig
from synthorg.eval.promotion import describe, new_routing, propose
from synthorg.eval.report import html, markdown
from synthorg.eval.results import TaskResult


class _Tables(HTMLParser):
    """Each table as rows of cell texts; and whether any <pre> or <script> appeared."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.tags: set[str] = set()
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _results(arm: str, outcomes: list[bool], cost: str, repeat: int = 0) -> list[TaskResult]:
    return [
        TaskResult(
            task_id=f"t{i:03d}",
            arm=arm,
            repeat=repeat,
            complexity=Complexity.MODERATE,
            conversation_id=f"c-{arm}-{i}-{repeat}",
            resolved=ok,
            termination_reason="completed",
            cost_usd=Decimal(cost),
            turns=3,
            wall_s=1.0,
            check_output="judge: 1 passed\n" + "x" * 8000,  # stored, never in the report
        )
        for i, ok in enumerate(outcomes)
    ]


def test_the_report_is_tables_and_a_decision_under_a_megabyte() -> None:
    engine = EngineConfig(default_loop_type="hybrid")
    results = []
    for repeat in range(3):  # 300 tasks x 2 arms x 3 repeats
        results += _results("hybrid", [i % 3 == 0 for i in range(300)], "0.05", repeat)
        results += _results("react", [i % 3 != 2 for i in range(300)], "0.01", repeat)
    proposals = propose(results, engine)
    lines = describe(engine, new_routing(engine, proposals))
    page = html("ev-1", results, ["hybrid", "react"], proposals, lines)
    assert len(page.encode()) < 1_000_000
    parsed = _Tables()
    parsed.feed(page)
    assert "pre" not in parsed.tags and "script" not in parsed.tags and "svg" in parsed.tags
    head = ["complexity", "incumbent (routed today)"]
    decision = next(t for t in parsed.tables if t[0][:2] == head)
    (row,) = decision[1:]
    assert row[:3] == ["moderate", "hybrid", "hybrid -> react"]
    assert "react resolves more" in row[3]
    assert "tasks" in row[4] and "p = " in row[4]
    assert "rule 2 needs at least 73 tasks" in row[5] and "the smallest p" in row[5]
    assert "routing moderate: hybrid -> react" in unescape(page)
    verdicts = next(t for t in parsed.tables if t[0][-1] == "verdict")
    assert all(len(r) == len(verdicts[0]) for r in verdicts)  # nothing cut off
    assert any("resolves more" in r[-1] for r in verdicts[1:])
    assert "**moderate** (routed to hybrid today): hybrid -> react" in markdown(
        "ev-1", results, ["hybrid", "react"], proposals
    )
