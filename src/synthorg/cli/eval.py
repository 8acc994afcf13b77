"""``synthorg eval``: A/B loops over a task suite, read the statistics, promote the winner."""

from __future__ import annotations

import asyncio
import getpass
import os
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from
from synthorg.errors import SynthOrgError
from synthorg.settings import CONFIG_ENV, Settings

if TYPE_CHECKING:
    from synthorg.eval.results import EvalPlan, TaskResult
    from synthorg.eval.suite import Suite
    from synthorg.runtime.judge import JudgeRuntime
    from synthorg.store.protocol import EvalRecordStore, Store

app = typer.Typer(
    help="Evaluate loops against each other and promote the winner.", no_args_is_help=True
)

STARTER = "starter"
"""The suite name that means the shipped starter suite (generated into the data dir)."""


def _suite_path(settings: Settings, suite: str) -> Path:
    if suite == STARTER:
        from synthorg.eval.starter import materialize

        return materialize(settings.home / "eval" / "starter")
    path = Path(suite).expanduser().resolve()
    if not path.is_file():
        fail(f"no suite file {suite}: give a .jsonl, .toml or .yaml file, or 'starter'")
    return path


def _repo_map(entries: list[str]) -> dict[str, str]:
    mapping = {}
    for entry in entries:
        name, sep, where = entry.partition("=")
        if not sep or not name or not where:
            fail(f"--repo-map takes REPO=PATH_OR_URL, got {entry!r}")
        mapping[name] = where if "://" in where else str(Path(where).expanduser().resolve())
    return mapping


@app.command("run")
def run(
    suite: str = typer.Argument(
        ..., help="Suite file (.jsonl SWE-bench rows, .toml, .yaml) or 'starter'."
    ),
    arms: str = typer.Option(
        "react,hybrid", help="Comma-separated loops (A first), each optionally LOOP@MODEL."
    ),
    repeats: int = typer.Option(1, min=1, max=100, help="Runs of each task per arm."),
    model: str | None = typer.Option(None, help="Model for every arm (default: [run] model)."),
    budget: Decimal | None = typer.Option(None, min=0, help="Cost ceiling per run (USD)."),
    max_turns: int | None = typer.Option(None, min=1, help="Turn cap per run."),
    concurrency: int = typer.Option(2, min=1, max=64, help="Runs at once."),
    repo_map: list[str] = typer.Option([], "--repo-map", help="SWE-bench repo=path (repeat)."),
    config: Path | None = ConfigOption,
) -> None:
    """Run every task with every arm (a normal governed run each), then judge it."""
    from synthorg.domain import new_id
    from synthorg.eval.fingerprint import fingerprint, suite_hash
    from synthorg.eval.results import Arm, EvalPlan
    from synthorg.eval.suite import load_suite

    settings = settings_from(config)
    path = _suite_path(settings, suite)
    mapping = _repo_map(repo_map)
    names = [a.strip() for a in arms.split(",") if a.strip()]
    if len(names) < 2:
        fail(f"--arms: an eval compares at least two arms, got {len(names)} ({arms!r})")
    try:
        prints = fingerprint(load_suite(path, mapping))  # every bad entry reported first
        plan = EvalPlan(
            eval_id=new_id("eval"),
            suite_path=str(path),
            suite_hash=suite_hash(prints),
            suite_fingerprint=prints,
            repo_map=mapping,
            arms=tuple(Arm.parse(a) for a in names),
            repeats=repeats,
            model=model,
            budget_usd=budget,
            max_turns=max_turns,
            concurrency=concurrency,
        )
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        fail(str(exc))
    run_async(_execute(settings, plan, new=True))


@app.command("resume")
def resume(eval_id: str, config: Path | None = ConfigOption) -> None:
    """Continue an interrupted eval: judged items are kept, nothing runs twice."""
    run_async(_execute(settings_from(config), eval_id, new=False))


async def _execute(settings: Settings, plan_or_id: EvalPlan | str, *, new: bool) -> None:
    from rich.progress import Progress

    from synthorg.eval.runner import EvalRunner, items_of, load_plan, load_results, save_plan
    from synthorg.eval.suite import load_suite
    from synthorg.service.boot import boot
    from synthorg.service.loops import default_provisioner, default_registry

    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        if isinstance(plan_or_id, str):
            plan = await load_plan(c.store, plan_or_id)
        else:
            plan = plan_or_id
            await save_plan(c.store, plan)
        suite = load_suite(Path(plan.suite_path), plan.repo_map)
        total = len(items_of(plan, suite))
        judge = await asyncio.to_thread(_judge_for, settings, suite)
        by_command = sum(task.check.command is not None for task in suite.tasks)
        if by_command:
            console.print(
                f"[yellow]warning:[/] {by_command} task(s) are judged by a check command's exit "
                "code, which runs in the agent's tree: an agent can subvert it. Give test ids "
                "(fail_to_pass) to have the judge decide per test id (docs/eval.md)."
            )
        done = len(await load_results(c.store, plan.eval_id))
        console.print(
            f"eval [bold]{plan.eval_id}[/]: {total} runs, {done} already judged "
            f"({', '.join(a.name for a in plan.arms)}; resume with "
            f"`synthorg eval resume {plan.eval_id}`)"
        )
        with Progress(console=console) as progress:
            bar = progress.add_task("runs", total=total, completed=done)

            def tell(key: str, result: TaskResult | None) -> None:
                if result is not None:
                    mark = "[green]resolved[/]" if result.resolved else "[red]not resolved[/]"
                    progress.console.print(
                        f"{escape(key)}: {mark} ({escape(result.termination_reason)})"
                    )
                    progress.advance(bar)

            await EvalRunner(c, plan, tell, judge).run()
        await _show(c.store, plan)


def _judge_for(settings: Settings, suite: Suite) -> JudgeRuntime | None:
    """The judge runtime when a task is checked by test ids: built once (seconds with uv's
    cache), before any run starts."""
    from synthorg.runtime.judge import build_judge

    if all(task.check.command is not None for task in suite.tasks):
        return None
    try:
        return build_judge(settings.home, lambda line: console.print(f"[dim]{escape(line)}[/]"))
    except SynthOrgError as exc:
        fail(f"cannot build the judge runtime the hidden checks run with: {exc}")


@app.command("judge")
def judge(config: Path | None = ConfigOption) -> None:
    """Build (or show) the judge runtime: the hash-pinned pytest venv hidden checks run with."""
    from synthorg.runtime.judge import build_judge

    settings = settings_from(config)
    try:
        built = build_judge(settings.home, lambda line: console.print(f"[dim]{escape(line)}[/]"))
    except SynthOrgError as exc:
        fail(str(exc))
    console.print(f"judge runtime {built.lock_hash}: {built.python}")


@app.command("show")
def show(eval_id: str, config: Path | None = ConfigOption) -> None:
    """The results and the paired statistics of an eval."""

    async def body() -> None:
        from synthorg.eval.runner import load_plan

        async with _store_only(settings_from(config)) as store:
            await _show(store, await load_plan(store, eval_id))

    run_async(body())


async def _show(store: EvalRecordStore, plan: EvalPlan) -> None:
    from synthorg.eval.compare import summarise
    from synthorg.eval.report import comparisons, groups, interval
    from synthorg.eval.runner import load_results

    results = await load_results(store, plan.eval_id)
    arms = [a.name for a in plan.arms]
    table = Table(
        "group",
        "arm",
        "runs",
        "resolved",
        "rate (95% CI)",
        "cost USD",
        "turns",
        "wall s",
        title=f"eval {plan.eval_id}",
    )
    for name, group in groups(results):
        for arm in arms:
            s = summarise(group, arm)
            table.add_row(
                name,
                arm,
                str(s.runs),
                str(s.resolved),
                f"{s.rate:.2f} ({s.rate_low:.2f}-{s.rate_high:.2f})",
                f"{s.mean_cost:.4f}",
                f"{s.mean_turns:.1f}",
                f"{s.mean_wall_s:.1f}",
            )
    console.print(table)
    verdicts = Table(
        *("group", "A vs B", "pairs", "only A", "only B", "McNemar p"),
        *("B−A cost USD (95% CI)", "B−A turns (95% CI)", "verdict"),
    )
    for cmp in comparisons(results, arms):
        verdicts.add_row(
            cmp.group,
            f"{cmp.incumbent} vs {cmp.candidate}",
            str(cmp.pairs),
            str(cmp.only_incumbent),
            str(cmp.only_candidate),
            f"{cmp.p_value:.4f}",
            interval(cmp.cost_diff, 4),
            interval(cmp.turns_diff, 1),
            escape(cmp.reason()),
        )
    console.print(verdicts)


@app.command("list")
def list_evals(config: Path | None = ConfigOption) -> None:
    """Evals in this store, newest first."""

    async def body() -> None:
        async with _store_only(settings_from(config)) as store:
            for eval_id in await store.eval_ids():
                console.print(eval_id)

    run_async(body())


@app.command("promote")
def promote(
    eval_id: str,
    apply: bool = typer.Option(False, "--apply", help="Write the overrides to the config file."),
    margin: float = typer.Option(0.05, min=0, max=1, help="Non-inferiority margin."),
    by: str | None = typer.Option(None, help="Who promotes (default: the OS user)."),
    config: Path | None = ConfigOption,
) -> None:
    """Propose the loop per complexity; with --apply write it to the config and record it."""
    from synthorg.eval import promotion
    from synthorg.eval.runner import load_results

    settings = settings_from(config)
    env_config = os.environ.get(CONFIG_ENV)
    target = config or (Path(env_config) if env_config else None)
    if apply and target is None:
        fail("--apply needs a config file to write: pass --config FILE (or set SYNTHORG_CONFIG)")

    async def body() -> None:
        async with _store_only(settings) as store:
            results = await load_results(store, eval_id)
            if not results:
                fail(f"eval {eval_id} has no judged runs yet")
            engine = settings.engine
            proposals = promotion.propose(results, engine, margin=margin)
            for p in proposals:
                arrow = f"{p.incumbent} -> [bold]{p.chosen}[/]" if p.changes else f"keep {p.chosen}"
                console.print(f"{p.complexity.value}: {arrow}: {escape(p.reason)}")
            plan = promotion.new_routing(engine, proposals)
            if not plan.changes:
                console.print("nothing to promote")
                return
            for line in promotion.describe(engine, plan):
                console.print(escape(line))
            if target is not None:
                console.print(escape(promotion.config_diff(Path(target), plan)))
            if not apply:
                console.print("dry run: add --apply to write it")
                return
            assert target is not None
            promotion.apply(Path(target), plan)
            moment = datetime.now(UTC).isoformat()
            await store.put_eval_item(
                eval_id,
                f"promotion/{moment}",
                {
                    "by": by or getpass.getuser(),
                    "at": moment,
                    "config": str(target),
                    "overrides": plan.overrides,
                    "loop_auto_select_enabled": plan.auto_select,
                    "routing": {c.value: loop for c, loop in plan.after.items()},
                    "reasons": {p.complexity.value: p.reason for p in proposals if p.changes},
                },
            )
            console.print(f"[green]written[/] to {escape(str(target))}")

    run_async(body())


@app.command("report")
def report(
    eval_id: str,
    out: Path = typer.Option(Path("."), help="Directory for report.html and summary.md."),
    margin: float = typer.Option(0.05, min=0, max=1, help="Non-inferiority margin."),
    config: Path | None = ConfigOption,
) -> None:
    """Write a self-contained HTML report (the decision, tables, charts) and a markdown summary."""
    from synthorg.eval import promotion
    from synthorg.eval import report as reports
    from synthorg.eval.runner import load_plan, load_results

    settings = settings_from(config)

    async def body() -> tuple[list[TaskResult], list[str]]:
        async with _store_only(settings) as store:
            plan = await load_plan(store, eval_id)
            return await load_results(store, eval_id), [a.name for a in plan.arms]

    results, arms = run_async(body())
    proposals = promotion.propose(results, settings.engine, margin=margin)
    lines = promotion.describe(settings.engine, promotion.new_routing(settings.engine, proposals))
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(reports.html(eval_id, results, arms, proposals, lines))
    (out / "summary.md").write_text(reports.markdown(eval_id, results, arms, proposals))
    console.print(f"wrote {out / 'report.html'} and {out / 'summary.md'}")


@app.command("export")
def export(
    eval_id: str,
    out: Path = typer.Option(
        ..., help="A directory (one predictions file per arm), or a .jsonl file with --arm."
    ),
    arm: str | None = typer.Option(None, help="Export only this arm, into the file --out."),
    repeat: int | None = typer.Option(None, min=0, help="Only this repeat (default: all)."),
    config: Path | None = ConfigOption,
) -> None:
    """SWE-bench predictions (instance_id, model_name_or_path, model_patch), one file per arm."""
    from synthorg.eval import export as exporting
    from synthorg.eval.runner import load_plan, load_results

    async def body() -> list[tuple[Path, int]]:
        async with _store_only(settings_from(config)) as store:
            plan = await load_plan(store, eval_id)
            return exporting.export(
                await load_results(store, eval_id),
                [a.name for a in plan.arms],
                plan.repeats,
                out,
                arm=arm,
                repeat=repeat,
            )

    for path, rows in run_async(body()):
        console.print(f"wrote {rows} predictions to {escape(str(path))}")


@app.command("starter")
def starter(
    dest: Path = typer.Argument(..., help="Where to write the starter repos + suite."),
) -> None:
    """Generate the starter suite (20 small repositories with real bugs) into DEST."""
    from synthorg.eval.starter import materialize

    console.print(f"suite: {materialize(dest.resolve())}")


def _store_only(settings: Settings) -> AbstractAsyncContextManager[Store]:
    """The store alone, for commands that only read or record (no gateway, no sandbox)."""
    from synthorg.service.store import opened_store

    return opened_store(settings)
