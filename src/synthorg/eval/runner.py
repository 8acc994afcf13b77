"""Run an evaluation: every task x arm x repeat as a normal governed run, then the hidden check.

Durable and resumable: the plan, each item's conversation id (written before the run starts)
and each verdict live in the store, so ``synthorg eval resume ID`` after a crash judges what
finished, continues what was interrupted and starts only what never started — no task is
run twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from synthorg.domain import (
    ConversationRecord,
    ConversationStatus,
    Task,
    TerminationReason,
    new_id,
)
from synthorg.errors import NotFoundError, SynthOrgError, UsageError
from synthorg.eval.check import run_hidden_check
from synthorg.eval.fingerprint import differences, fingerprint, suite_hash
from synthorg.eval.ownership import owning
from synthorg.eval.results import Arm, EvalPlan, TaskResult, result_key
from synthorg.eval.suite import EvalTask, Suite, load_suite
from synthorg.faultpoints import pause_point
from synthorg.runtime.judge import JudgeRuntime
from synthorg.service.boot import Components
from synthorg.service.options import RunOptions
from synthorg.store.protocol import EvalRecordStore
from synthorg.workspace.git import run_git_sync
from synthorg.workspace.remote import ProjectRemote

_ENDED = frozenset(
    {
        ConversationStatus.FINISHED,
        ConversationStatus.FAILED,
        ConversationStatus.CANCELLED,
        ConversationStatus.ERROR,
    }
)
"""A conversation in one of these is judged as it is, never run again."""

Progress = Callable[[str, TaskResult | None], None]
"""Told of each item as it starts (result None) and as it is judged."""


@dataclass(frozen=True)
class Item:
    """One unit of work: a task, an arm, a repeat."""

    task: EvalTask
    arm: Arm
    repeat: int

    @property
    def key(self) -> str:
        return result_key(self.task.id, self.arm.name, self.repeat)

    @property
    def conversation_key(self) -> str:
        return "conversation/" + self.key.removeprefix("result/")


async def save_plan(store: EvalRecordStore, plan: EvalPlan) -> None:
    """Record the plan; the eval exists from here on."""
    await store.put_eval_item(plan.eval_id, "plan", plan.model_dump(mode="json"))


async def load_plan(store: EvalRecordStore, eval_id: str) -> EvalPlan:
    """The plan of an existing eval; a clear error for an unknown id."""
    items = await store.eval_items(eval_id, "plan")
    if "plan" not in items:
        raise NotFoundError(f"no eval {eval_id!r} in this store (see `synthorg eval list`)")
    return EvalPlan.model_validate(items["plan"])


async def load_results(store: EvalRecordStore, eval_id: str) -> list[TaskResult]:
    """Every verdict recorded so far."""
    items = await store.eval_items(eval_id, "result/")
    return [TaskResult.model_validate(body) for body in items.values()]


def items_of(plan: EvalPlan, suite: Suite) -> list[Item]:
    """The full cross product, in a fixed order (repeat, task, arm)."""
    return [
        Item(task, arm, repeat)
        for repeat in range(plan.repeats)
        for task in suite.tasks
        for arm in plan.arms
    ]


class EvalRunner:
    """Runs the items of one eval not yet judged, up to ``plan.concurrency`` at a time."""

    def __init__(
        self,
        components: Components,
        plan: EvalPlan,
        progress: Progress,
        judge: JudgeRuntime | None,
    ) -> None:
        self._c = components
        self._plan = plan
        self._progress = progress
        self._judge = judge
        self._scratch = components.settings.home / "eval" / plan.eval_id

    async def run(self) -> list[TaskResult]:
        suite = load_suite(Path(self._plan.suite_path), self._plan.repo_map)
        same_suite(self._plan, suite)
        with owning(self._c.settings.home, self._plan.eval_id):
            return await self._run(suite)

    async def _run(self, suite: Suite) -> list[TaskResult]:
        done = {r.key for r in await load_results(self._c.store, self._plan.eval_id)}
        todo = [item for item in items_of(self._plan, suite) if item.key not in done]
        gate = asyncio.Semaphore(self._plan.concurrency)

        async def one(item: Item) -> None:
            async with gate:
                result = await self._run_item(item)
                await self._c.store.put_eval_item(
                    self._plan.eval_id, item.key, result.model_dump(mode="json")
                )
                self._progress(item.key, result)

        try:
            async with asyncio.TaskGroup() as group:
                for item in todo:
                    group.create_task(one(item))
        except ExceptionGroup as failed:
            # An item's own error (a conversation another host's live eval owns) is the
            # operator's to read in one line, not inside a group's traceback.
            known = failed.subgroup(lambda e: isinstance(e, SynthOrgError))
            if known is None:
                raise
            raise _first_leaf(known) from failed
        return await load_results(self._c.store, self._plan.eval_id)

    async def _run_item(self, item: Item) -> TaskResult:
        self._progress(item.key, None)
        started = time.monotonic()
        repo = await asyncio.to_thread(local_repo, item.task.repository, self._c.settings.home)
        record = await self._conversation(item, repo)
        if record.status not in _ENDED:
            # New, or interrupted by a crash of an earlier eval process: (re)start it.
            await self._c.service.start(record.id)
            await self._c.service.wait(record.id)
        final = await self._c.store.get_conversation(record.id)
        checking = time.monotonic()
        scratch = await asyncio.to_thread(self._check_dir, item)
        try:
            outcome = await run_hidden_check(
                self._c.sandbox,
                git_dir=_git_dir(repo),
                base=item.task.base_ref,
                commit=final.commit_sha,
                check=item.task.check,
                judge=self._judge,
                scratch=scratch,
            )
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, ignore_errors=True)
        patch = await asyncio.to_thread(_diff, repo, item.task.base_ref, final.commit_sha)
        return TaskResult(
            task_id=item.task.id,
            arm=item.arm.name,
            repeat=item.repeat,
            complexity=item.task.complexity,
            conversation_id=final.id,
            resolved=outcome.passed,
            termination_reason=(final.termination_reason or TerminationReason.ERROR).value,
            cost_usd=final.usage.cost_usd,
            tokens_in=final.usage.tokens_in,
            tokens_out=final.usage.tokens_out,
            turns=final.turns,
            wall_s=round(time.monotonic() - started, 3),
            check_s=round(time.monotonic() - checking, 3),
            commit_sha=final.commit_sha,
            model_patch=patch,
            check_output=outcome.output,
        )

    def _check_dir(self, item: Item) -> Path:
        """A new directory for each check attempt: a tree left mounted by a killed attempt
        (its sandbox's quota image) can never make the next one fail with EBUSY."""
        parent = self._scratch / "checks"
        parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(item.key.encode()).hexdigest()[:16]
        return Path(tempfile.mkdtemp(prefix=f"{digest}-", dir=parent))

    async def _conversation(self, item: Item, repo: Path) -> ConversationRecord:
        """The item's conversation: the recorded one on resume, else a new one.

        Its id is recorded before it is made, so a kill at any point between the two leaves
        either nothing or the id: resume finds the conversation under it or makes it under it,
        never a second one for the same item.
        """
        store = self._c.store
        known = await store.eval_items(self._plan.eval_id, item.conversation_key)
        if item.conversation_key in known:
            conversation_id = str(known[item.conversation_key]["id"])
            try:
                return await store.get_conversation(conversation_id)
            except NotFoundError:
                pass  # the id was recorded, the process died before the conversation was made
        else:
            conversation_id = new_id("conv")
            await store.put_eval_item(
                self._plan.eval_id, item.conversation_key, {"id": conversation_id}
            )
        digest = hashlib.sha256(f"{self._plan.eval_id}/{item.key}".encode()).hexdigest()
        task = Task(
            id=f"task-{digest[:24]}",
            project_id=f"eval-{self._plan.eval_id}",
            prompt=item.task.prompt,
            complexity=item.task.complexity,
            repository=str(repo),
        )
        options = RunOptions(
            loop=item.arm.loop,
            model=item.arm.model or self._plan.model,
            budget_usd=self._plan.budget_usd,
            max_turns=self._plan.max_turns,
            base_ref=item.task.base_ref,
        )
        record = await self._c.service.create(task, options, conversation_id=conversation_id)
        await pause_point("eval.conversation_created")
        return record


def local_repo(repository: str, home: Path) -> Path:
    """A local path as is; a URL cloned once into the data dir ``home``, by the hardened git
    runner with only that URL's transport allowed (the projects' rule for a remote URL)."""
    if "://" not in repository and not repository.startswith("git@"):
        path = Path(repository)
        if not (path / ".git").exists():
            raise UsageError(f"{repository} is not a git repository with a work tree")
        return path
    try:
        transport = ProjectRemote(remote=repository).transport()
    except ValidationError as exc:
        reason = "; ".join(str(e["ctx"]["error"]) for e in exc.errors() if "ctx" in e)
        raise UsageError(f"the suite's repository {repository!r}: {reason}") from exc
    digest = hashlib.sha256(repository.encode()).hexdigest()[:16]
    clone = home / "eval" / "repos" / digest
    if not (clone / ".git").exists():
        clone.parent.mkdir(parents=True, exist_ok=True)
        run_git_sync(
            ["clone", "-q", "--", repository, str(clone)], clone.parent, overrides=transport
        )
    return clone


def same_suite(plan: EvalPlan, suite: Suite) -> None:
    """Refuse a suite whose content differs from the one the eval was planned with."""
    if plan.suite_hash is None:
        return  # planned before suites were fingerprinted: nothing to compare with
    now = fingerprint(suite)
    if suite_hash(now) == plan.suite_hash:
        return
    changes = "\n".join(f"  {line}" for line in differences(plan.suite_fingerprint, now))
    raise UsageError(
        f"the suite {plan.suite_path} changed since eval {plan.eval_id} was planned; its "
        f"results would be judged by two different suites. Restore it, or start a new eval "
        f"(`synthorg eval run`):\n{changes}"
    )


def _first_leaf(group: BaseExceptionGroup[SynthOrgError]) -> SynthOrgError:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _git_dir(repo: Path) -> Path:
    dot_git = repo / ".git"
    return dot_git if dot_git.is_dir() else repo


def _diff(repo: Path, base: str, commit: str | None) -> str:
    if commit is None:
        return ""
    args = ["diff", "--no-ext-diff", "--no-textconv", base, commit]
    return run_git_sync([f"--git-dir={_git_dir(repo)}", *args], repo, check=False).text
