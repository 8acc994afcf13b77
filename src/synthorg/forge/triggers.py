"""What a verified delivery asks for: a trigger, a refusal (author not allowed), or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from synthorg.forge.config import ForgeProject

RUN_BRANCH_PREFIX = "synthorg/"


class Kind(StrEnum):
    """The triggers the intake knows."""

    ISSUE = "issue"  # labelled, or commanded in a comment: start (or continue) a run
    CI_FAILED = "ci_failed"  # a failed check on the run's own pull request
    REVIEW = "review"  # a review or review comment on the run's own pull request


@dataclass(frozen=True, slots=True)
class Trigger:
    """A delivery that starts or resumes work."""

    kind: Kind
    issue: int | None  # the issue (or, for feedback, the pull request) number
    branch: str | None  # feedback: the pull request's head branch (synthorg/<conversation>)
    author: str
    text: str  # the instructions: the comment after the command, the review, the check name


@dataclass(frozen=True, slots=True)
class Refusal:
    """A delivery that would trigger, from an author the project does not allow."""

    issue: int | None
    author: str
    reason: str


def _get(data: Any, *path: str) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _allowed(project: ForgeProject, login: str, association: str) -> bool:
    return login in project.allow_authors or association.upper() in project.associations


_CI_EVENTS = ("check_run", "check_suite", "workflow_run")
_FAILED = ("failure", "timed_out")


class TriggerName(StrEnum):
    """The triggers as the console shows and filters them."""

    LABEL = "label"
    COMMENT = "comment"
    CI = "ci"
    REVIEW = "review"


TRIGGER_EVENTS: dict[TriggerName, tuple[str, ...]] = {
    TriggerName.LABEL: ("issues.labeled",),
    TriggerName.COMMENT: ("issue_comment.created",),
    TriggerName.CI: tuple(f"{event}.completed" for event in _CI_EVENTS),
    TriggerName.REVIEW: ("pull_request_review.submitted", "pull_request_review_comment.created"),
}
"""The recorded delivery events (``X-GitHub-Event.action``) of each trigger."""


def trigger_of(event: str) -> TriggerName | None:
    """The trigger a recorded delivery event (``issues.labeled``) belongs to."""
    return next((name for name, events in TRIGGER_EVENTS.items() if event in events), None)


def _ci_failure(event: str, run: dict[str, Any], author: str) -> Trigger | None:
    """A failed check run, check suite or workflow run on a run's pull request."""
    if run.get("conclusion") not in _FAILED:
        return None
    name = run.get("name") or _get(run, "app", "name") or event
    text = f"{event.replace('_', ' ')} {name!s} {run.get('conclusion')}"
    for pull in run.get("pull_requests") or []:
        branch = _get(pull, "head", "ref")
        if isinstance(branch, str) and branch.startswith(RUN_BRANCH_PREFIX):
            return Trigger(Kind.CI_FAILED, pull.get("number"), branch, author, text)
    # A workflow run's pull_requests is empty for some triggers; its head branch still names it.
    branch = run.get("head_branch")
    if isinstance(branch, str) and branch.startswith(RUN_BRANCH_PREFIX):
        return Trigger(Kind.CI_FAILED, None, branch, author, text)
    return None


def classify(project: ForgeProject, event: str, data: dict[str, Any]) -> Trigger | Refusal | None:
    """The delivery's meaning for ``project``; None when it is of no interest."""
    action = data.get("action")
    author = str(_get(data, "sender", "login") or "")
    if event == "issues" and action == "labeled":
        if _get(data, "label", "name") != project.label:
            return None
        # GitHub lets only people with triage rights label an issue: the label is the
        # permission. The issue's author may be anyone, so its text stays untrusted.
        return Trigger(Kind.ISSUE, _get(data, "issue", "number"), None, author, "")
    if event == "issue_comment" and action == "created":
        body = str(_get(data, "comment", "body") or "")
        first, _, rest = body.strip().partition("\n")
        head, _, args = first.partition(" ")
        if head != project.command:
            return None
        issue = _get(data, "issue", "number")
        author = str(_get(data, "comment", "user", "login") or author)
        association = str(_get(data, "comment", "author_association") or "")
        if not _allowed(project, author, association):
            return Refusal(issue, author, f"author_association {association or 'none'}")
        return Trigger(Kind.ISSUE, issue, None, author, (args + "\n" + rest).strip())
    if event in _CI_EVENTS and action == "completed":
        return _ci_failure(event, data.get(event) or {}, author)
    if (event, action) in (
        ("pull_request_review", "submitted"),
        ("pull_request_review_comment", "created"),
    ):
        branch = _get(data, "pull_request", "head", "ref")
        if not (isinstance(branch, str) and branch.startswith(RUN_BRANCH_PREFIX)):
            return None
        item = data.get("review") or data.get("comment") or {}
        login = str(_get(item, "user", "login") or author)
        if not _allowed(project, login, str(item.get("author_association") or "")):
            return Refusal(_get(data, "pull_request", "number"), login, "not an allowed author")
        text = str(item.get("body") or "")
        if not text.strip():
            return None  # an approval without words asks for nothing
        number = _get(data, "pull_request", "number")
        return Trigger(Kind.REVIEW, number, branch, login, text)
    return None
