"""Events intake writes: a task was submitted, rejected, asked to be cancelled, or reviewed.

People's requests about a task (cancel it, approve or deny it) go through intake's outbox (the console
runs intake's commands); the dispatcher carries them out and says so with its own events."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, JsonValue

from shared.events.envelope import Envelope, Payload
from shared.events.values import Detail, EntityId
from shared.submission import InputRef, Problem, TaskSubmission


class RejectionReason(Payload):
    """One reason a submission was refused: the field, the value received, the problem."""

    field: str = Field(description="dotted path, e.g. inputs[2].version; '(whole input)' for the body")
    value: JsonValue = None
    problem: str = Field(description="what was expected, in plain English")

    @classmethod
    def from_problem(cls, problem: Problem) -> RejectionReason:
        return cls(field=problem.field, value=problem.value, problem=f"expected {problem.expected}")


class TaskSubmittedData(Payload):
    task_id: EntityId
    idempotency_key: EntityId = Field(
        description="the submission's key, or one intake derived from the body when none was given"
    )
    submission: TaskSubmission = Field(description="the full validated submission (schema v1)")


class TaskSubmitted(Envelope):
    """Intake accepted a submission: the task exists from now on."""

    type: Literal["task.submitted"] = "task.submitted"
    data: TaskSubmittedData


class TaskRejectedData(Payload):
    task_id: EntityId = Field(description="id intake gave the attempt, so the rejection can be looked up")
    idempotency_key: EntityId | None = None
    name: str | None = Field(None, description="the submission's name, when it had a readable one")
    project: str | None = Field(None, description="the submission's project, when it had a readable one")
    reasons: tuple[RejectionReason, ...] = Field(min_length=1)


class TaskRejected(Envelope):
    """Intake refused a submission; every reason is listed."""

    type: Literal["task.rejected"] = "task.rejected"
    data: TaskRejectedData


class TaskCancelRequestedData(Payload):
    task_id: EntityId
    reason: Detail = ""


class TaskCancelRequested(Envelope):
    """Someone asked to cancel a task (the actor says who); the dispatcher carries it out."""

    type: Literal["task.cancel_requested"] = "task.cancel_requested"
    data: TaskCancelRequestedData


class ReviewDecision(StrEnum):
    """A reviewer's decision on a task that waits for approval."""

    APPROVE = "approve"  # it may start (`task.approved`)
    DENY = "deny"  # it will not run (`task.denied`, then `task.cancelled`)


class TaskReviewedData(Payload):
    task_id: EntityId
    decision: ReviewDecision
    reason: Detail = Field(min_length=1, description="why, in the reviewer's words")


class TaskReviewed(Envelope):
    """A reviewer (the actor) approved or denied a task that waits for approval; the dispatcher carries it out."""

    type: Literal["task.reviewed"] = "task.reviewed"
    data: TaskReviewedData


class TaskFlagClearedData(Payload):
    task_id: EntityId
    reason: Detail = Field(min_length=1, description="what the person checked, in their words")


class TaskFlagCleared(Envelope):
    """A reviewer (the actor) checked the output of a success the dispatcher flagged (issue 15) and
    cleared the flag; the ledger moves the held-back output into the counted totals, once."""

    type: Literal["task.flag_cleared"] = "task.flag_cleared"
    data: TaskFlagClearedData


class DataReadySignalledData(Payload):
    input: InputRef = Field(description="what became ready: an s3:// URI or {dataset, version}")
    location: str | None = Field(None, description="where a dataset version's data lives, if the signal said")
    source: Detail = Field("", description="who signalled, e.g. the upstream pipeline's run id")


class DataReadySignalled(Envelope):
    """An upstream system said some data is ready (a `data.ready` entry on `cf:ingest`)."""

    type: Literal["data.ready_signalled"] = "data.ready_signalled"
    data: DataReadySignalledData
