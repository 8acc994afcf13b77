"""The names Temporal shows and routes by: workflow type, activities, signal, update.

Plain strings only, so the workflow sandbox can import this module without side effects.
"""

from __future__ import annotations

WORKFLOW = "SynthorgRun"
"""The workflow type of one run; its workflow id is the conversation id."""

CREATE_WORKFLOW = "SynthorgCreate"
"""The workflow type of the server's create: prepare the conversation, do not start it."""

ROLLBACK_WORKFLOW = "SynthorgRollback"
"""The workflow type of a rollback (id = conversation id, so never beside an open run)."""

DELETE_WORKFLOW = "SynthorgDelete"
"""The workflow type of a delete (id = conversation id, so never beside an open run)."""

PREPARE_WORKSPACE = "prepare_workspace"
"""Activity: create the conversation and its worktree (idempotent on retry)."""

RUN_LOOP = "run_loop"
"""Activity: run the loop to its end (the commit gate included), heartbeating the last seq."""

CONFIRM_LANDING = "confirm_landing"
"""Activity: read the landed outcome back (status, commit on the run's branch)."""

ROLLBACK = "rollback_workspace"
"""Activity, on any worker: restore the conversation's worktree to a checkpoint."""

DELETE = "delete_conversation"
"""Activity, on any worker: remove the conversation (worktree, remote refs, record)."""

APPLY_CONTROL = "apply_control"
"""Activity, on the holding worker's own queue: pause / interrupt / steer / cancel / decide."""

HELD_BY = "held_by"
"""Signal: the run-loop activity tells its workflow which worker queue holds the run now."""

CONTROL = "control"
"""Update: a control command, answered by the worker that holds the run."""


def worker_queue(task_queue: str, worker_id: str) -> str:
    """The task queue only this worker polls (control commands for the runs it holds)."""
    return f"{task_queue}@{worker_id}"
