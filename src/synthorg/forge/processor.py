"""The background half of the intake: each queued delivery is refused, skipped or drives a run.

Deliveries are taken oldest first from the store, so the queue survives a restart; a delivery
that would start a run past the project's concurrency limit stays queued until a slot frees.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

from synthorg.domain import Task, TerminationReason
from synthorg.domain.events import (
    ConfirmationDecisionEvent,
    ConfirmationRequestEvent,
    ToolAuditEvent,
)
from synthorg.domain.ids import new_id
from synthorg.errors import NotFoundError, SynthOrgError
from synthorg.forge.config import ForgeProject, ForgeSettings
from synthorg.forge.prompt import feedback_message, issue_task
from synthorg.forge.stages import ForgeStages, RunReport, console_link
from synthorg.forge.triggers import (
    RUN_BRANCH_PREFIX,
    Kind,
    Refusal,
    Trigger,
    TriggerName,
    classify,
    trigger_of,
)
from synthorg.logging import get_logger
from synthorg.service.options import RunOptions
from synthorg.service.protocol import RunService
from synthorg.store.protocol import DeliveryRecord, DeliveryState, Store

log = get_logger("synthorg.forge")

_BATCH = 50
_HISTORY = 1000  # deliveries read back for the caps (a day's triggers of one project)


_STEERED = "message sent to the active run"  # its run is followed already
_CAPS = ("daily cap reached", "CI-feedback cap reached")
"""Refusals of an allowed author, said on the forge (a stranger's refusal is not: see docs)."""


class _Wait(Exception):
    """Not now: the delivery stays queued (a concurrency slot is taken)."""


class DeliveryProcessor:
    """Drains the store's queue of deliveries; one at a time, in arrival order."""

    def __init__(
        self,
        settings: ForgeSettings,
        store: Store,
        service: RunService,
        *,
        stages: Mapping[str, ForgeStages] | None = None,
        poll_s: float = 2.0,
    ) -> None:
        self._settings = settings
        self._store = store
        self._service = service
        self._stages = dict(stages or {})
        self._poll_s = poll_s  # the backstop for slots freed by runs that end
        self._bell = asyncio.Event()
        self._followers: asyncio.TaskGroup | None = None

    def wake(self) -> None:
        """A delivery was queued."""
        self._bell.set()

    async def run_forever(self) -> None:
        """Process the queue until cancelled; each started run is followed to its stages."""
        async with asyncio.TaskGroup() as followers:
            self._followers = followers
            await self._loop()

    async def _loop(self) -> None:
        while True:
            self._bell.clear()
            try:
                await self.drain()
            except SynthOrgError as exc:  # the store is down: try again on the next round
                log.warning("FORGE_DRAIN_FAILED", error=str(exc))
            try:
                async with asyncio.timeout(self._poll_s):
                    await self._bell.wait()
            except TimeoutError:
                pass

    async def drain(self) -> None:
        """Handle every queued delivery once."""
        for record in await self._store.queued_deliveries(_BATCH):
            try:
                state, outcome, conversation = await self._handle(record)
            except _Wait:
                continue
            except SynthOrgError as exc:
                state, outcome, conversation = DeliveryState.FAILED, str(exc), None
            except Exception as exc:  # one bad delivery must not stop the queue
                log.error("FORGE_DELIVERY_CRASHED", delivery=record.delivery_id, error=repr(exc))
                state, outcome, conversation = DeliveryState.FAILED, repr(exc)[:500], None
            await self._store.settle_delivery(
                record.delivery_id, state, outcome, conversation_id=conversation
            )
            if conversation is not None:
                await self._audit(
                    conversation,
                    "forge.trigger",
                    "ok" if state is DeliveryState.STARTED else "refused",
                    outcome,
                    delivery=record.delivery_id,
                    event=record.event,
                )
            if state is DeliveryState.STARTED and conversation and outcome != _STEERED:
                self._follow(record.project_id, conversation)
            elif state is DeliveryState.REFUSED and outcome.startswith(_CAPS):
                self._tell(record, conversation, f"Not started: {outcome}.")
            log.info(
                "FORGE_SETTLED",
                delivery=record.delivery_id,
                state=state.value,
                outcome=outcome,
                conversation=conversation,
            )

    async def _handle(self, record: DeliveryRecord) -> tuple[DeliveryState, str, str | None]:
        config = self._settings.projects.get(record.project_id)
        if config is None:
            return DeliveryState.SKIPPED, "the project no longer has a forge webhook", None
        event = record.event.split(".", 1)[0]
        meaning = classify(config, event, record.payload)
        if meaning is None:
            return DeliveryState.SKIPPED, "no longer of interest", None
        if isinstance(meaning, Refusal):
            # No comment is posted: answering anyone who comments would let strangers make
            # the bot write on a public repository. The refusal is kept here (forge status).
            known = None
            if isinstance(meaning.issue, int):
                known = await self._store.issue_conversation(record.project_id, meaning.issue)
            return DeliveryState.REFUSED, f"{meaning.author}: {meaning.reason}", known
        if meaning.kind is Kind.ISSUE:
            return await self._issue(record, config, meaning)
        return await self._feedback(record, config, meaning)

    async def _issue(
        self, record: DeliveryRecord, config: ForgeProject, trigger: Trigger
    ) -> tuple[DeliveryState, str, str | None]:
        if trigger.issue is None:
            return DeliveryState.SKIPPED, "the delivery names no issue", None
        refusal = await self._over_daily_cap(record.project_id, config)
        if refusal:
            return DeliveryState.REFUSED, refusal, None
        existing = await self._store.issue_conversation(record.project_id, trigger.issue)
        if existing is not None and await self._exists(existing):
            return await self._continue(record, config, existing, trigger.text or None)
        await self._check_slot(record.project_id, config)
        task = Task(
            id=new_id("forge"),
            project_id=record.project_id,
            prompt=issue_task(record.payload, trigger.text),
            repository=config.repository,
        )
        options = RunOptions(
            budget_usd=config.budget_usd,
            model=config.model,
            confirmation_policy=config.confirmation_policy,
        )
        created = await self._service.create(task, options)
        await self._service.start(created.id)
        return DeliveryState.STARTED, f"run started for issue #{trigger.issue}", created.id

    async def _feedback(
        self, record: DeliveryRecord, config: ForgeProject, trigger: Trigger
    ) -> tuple[DeliveryState, str, str | None]:
        conversation = (trigger.branch or "").removeprefix(RUN_BRANCH_PREFIX)
        if not await self._exists(conversation):
            return DeliveryState.SKIPPED, f"no conversation {conversation!r} here", None
        if trigger.kind is Kind.CI_FAILED:
            rounds = await self._ci_rounds(record.project_id, conversation)
            if rounds >= config.max_ci_rounds:
                return (
                    DeliveryState.REFUSED,
                    f"CI-feedback cap reached ({rounds} of {config.max_ci_rounds} rounds)",
                    conversation,
                )
        refusal = await self._over_daily_cap(record.project_id, config)
        if refusal:
            return DeliveryState.REFUSED, refusal, conversation
        text = trigger.text
        stages = self._stages.get(record.project_id)
        if trigger.kind is Kind.CI_FAILED and stages is not None:
            try:  # the failing jobs' names and log tails, as the ci_status tool gathers them
                text = await stages.ci_report(conversation, trigger.issue)
            except SynthOrgError as exc:
                text = f"{trigger.text} (the CI report could not be read: {exc})"
        message = feedback_message(trigger.kind.value, trigger.author, text)
        return await self._continue(record, config, conversation, message)

    async def _continue(
        self, record: DeliveryRecord, config: ForgeProject, conversation: str, message: str | None
    ) -> tuple[DeliveryState, str, str | None]:
        if self._service.is_active(conversation):
            if message:
                await self._service.steer(conversation, message)
            return DeliveryState.STARTED, _STEERED, conversation
        await self._check_slot(record.project_id, config)
        await self._service.start(conversation, message=message)
        return DeliveryState.STARTED, "run resumed", conversation

    async def _exists(self, conversation: str) -> bool:
        try:
            await self._store.get_conversation(conversation)
        except NotFoundError:
            return False
        return True

    async def _started(self, project: str) -> list[DeliveryRecord]:
        recent = await self._store.recent_deliveries(_HISTORY, project_id=project)
        return [r for r in recent if r.state is DeliveryState.STARTED and r.conversation_id]

    async def _check_slot(self, project: str, config: ForgeProject) -> None:
        active = {
            r.conversation_id
            for r in await self._started(project)
            if r.conversation_id and self._service.is_active(r.conversation_id)
        }
        if len(active) >= config.max_concurrent:
            raise _Wait

    async def _ci_rounds(self, project: str, conversation: str) -> int:
        """CI resumes of the conversation so far (its pull request is its own)."""
        return sum(
            1
            for r in await self._started(project)
            if trigger_of(r.event) is TriggerName.CI and r.conversation_id == conversation
        )

    async def _over_daily_cap(self, project: str, config: ForgeProject) -> str:
        if config.daily_cap_usd is None:
            return ""
        today = datetime.now(UTC).date()
        conversations = {
            r.conversation_id
            for r in await self._started(project)
            if r.conversation_id and r.received_at.astimezone(UTC).date() == today
        }
        spent = Decimal(0)
        for conversation in conversations:
            for execution in await self._store.executions_of(conversation):
                spent += execution.cost_usd
        if spent >= config.daily_cap_usd:
            return f"daily cap reached: {spent} of {config.daily_cap_usd} USD spent today"
        return ""

    def _follow(self, project: str, conversation: str) -> None:
        stages = self._stages.get(project)
        if stages is not None and self._followers is not None:
            self._followers.create_task(self._guarded(project, stages, conversation))

    def _tell(self, record: DeliveryRecord, conversation: str | None, text: str) -> None:
        """Say a cap's refusal on the issue (or pull request) the delivery came from."""
        stages = self._stages.get(record.project_id)
        if stages is None or record.issue is None or self._followers is None:
            return
        issue = record.issue

        async def say() -> None:
            try:
                await stages.comment(conversation or "none", issue, text)
            except SynthOrgError as exc:
                log.warning("FORGE_REFUSAL_COMMENT_FAILED", issue=issue, error=str(exc))

        self._followers.create_task(say())

    async def _guarded(self, project: str, stages: ForgeStages, conversation: str) -> None:
        # One run's stages failing in an unforeseen way must not stop the processor (the
        # followers' task group would cancel every other run's stages and the queue).
        try:
            await self._stages_of_run(project, stages, conversation)
        except Exception as exc:
            log.error("FORGE_STAGES_CRASHED", conversation=conversation, error=repr(exc))

    async def _stages_of_run(self, project: str, stages: ForgeStages, conversation: str) -> None:
        """Status comment, then push and pull request once the run has landed."""
        config = self._settings.projects[project]
        origin = await self._origin(project, conversation)
        if origin is None or origin.issue is None:
            return
        issue, link = origin.issue, console_link(self._settings.console_url, conversation)
        title = str((origin.payload.get("issue") or {}).get("title") or f"issue #{issue}")
        try:
            working = f"SynthOrg is working on this: {link}"
            await stages.status(conversation, issue, working)
            async with asyncio.TaskGroup() as group:
                watch = group.create_task(
                    self._approvals(stages, conversation, issue, link, working)
                )
                result = await self._service.wait(conversation)
                watch.cancel()
            if result is None:
                return
            report = RunReport(
                conversation, issue, result, config.budget_usd, self._settings.console_url
            )
            if result.termination_reason is TerminationReason.NO_OP or (
                result.succeeded and result.commit_sha is None
            ):
                await stages.status(conversation, issue, f"Finished with nothing to land. {link}")
                return
            if not result.succeeded:
                why = result.error or result.termination_reason.value
                await stages.status(conversation, issue, f"Failed: {why}. {link}")
                return
            pull = await stages.publish(report, f"Fix #{issue}: {title}"[:256])
            number, url = pull.get("number"), pull.get("html_url")
            if isinstance(number, int) and isinstance(url, str):  # the console checks the URL
                await self._store.record_pull(conversation, project, number, url)
            await self._audit(
                conversation,
                "forge.publish",
                "ok",
                f"pushed {result.commit_sha} to synthorg/{conversation}; pull request "
                f"#{pull.get('number')} {pull.get('html_url', '')}",
            )
            await stages.status(
                conversation,
                issue,
                f"Finished: pull request #{pull.get('number')} {pull.get('html_url', '')}\n\n"
                + report.pull_body(),
            )
        except SynthOrgError as exc:
            log.warning("FORGE_STAGE_FAILED", conversation=conversation, error=str(exc))
            with contextlib.suppress(SynthOrgError):
                await self._audit(conversation, "forge.publish", "error", str(exc))
            with contextlib.suppress(SynthOrgError):
                await stages.status(conversation, issue, f"Failed: {exc}. {link}")

    async def _approvals(
        self, stages: ForgeStages, conversation: str, issue: int, link: str, working: str
    ) -> None:
        """Keep the status comment saying when the run waits for an approval, and when not."""
        waiting = False
        async for stored in self._store.tail(conversation):
            event = stored.event
            text = None
            if isinstance(event, ConfirmationRequestEvent) and not waiting:
                waiting, text = True, f"Waiting for approval: {link}"
            elif isinstance(event, ConfirmationDecisionEvent) and waiting:
                waiting, text = False, working
            if text is not None:
                try:
                    await stages.status(conversation, issue, text)
                except SynthOrgError as exc:  # the next change tries again
                    log.warning("FORGE_STATUS_FAILED", conversation=conversation, error=str(exc))

    async def _audit(
        self,
        conversation: str,
        tool: str,
        outcome: Literal["ok", "refused", "error"],
        detail: str,
        **arguments: str,
    ) -> None:
        """A stage of the control plane, in the conversation's log (no credential in it)."""
        event = ToolAuditEvent(
            tool=tool,
            arguments=arguments,
            outcome=outcome,
            detail=detail,
            duration_ms=0,
        )
        await self._store.append(conversation, event)

    async def _origin(self, project: str, conversation: str) -> DeliveryRecord | None:
        """The issue delivery that started the conversation (feedback names only its PR)."""
        for record in reversed(await self._started(project)):
            if record.conversation_id == conversation and record.event.startswith("issue"):
                return record
        return None
