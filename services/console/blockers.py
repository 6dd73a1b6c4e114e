"""What each open task waits for, grouped and counted: the readiness board's decision (pure).

    board = group_board(views, waits, now)     # views: open TaskViews; waits: readiness rows per task id
    board.counts[BlockerKind.DATA]             # how many wait for data
    board.groups[BlockerKind.DATA][0].inputs   # which inputs, since when

A task's blocker follows from its derived `reason` (the machine value of `ViewReason`, `DeferralReason`,
`UnmatchableReason` or `RequeueReason`) through one table, `BLOCKER_OF_REASON`; a unit test checks
that every value of those enums has a row, so a new reason cannot fall off the board.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from shared.events.reasons import RequeueReason, UnmatchableReason
from shared.task_view import TaskView, ViewReason
from shared.scheduling.model import DeferralReason, PriorityClass, QueuedTask
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordering import order_queue


class BlockerKind(StrEnum):
    """What an open task waits for, in the board's order (most actionable first)."""

    RUNNING = "running"  # holds GPUs (leased or running)
    RUNNABLE = "runnable"  # ready, matched, eligible: starts as soon as the dispatcher places it
    DATA = "data"  # some inputs are missing
    QUOTA = "quota"  # the project's quota does not cover it (exhausted, expiring, not yet valid, none)
    APPROVAL = "approval"  # waits for a reviewer's approval
    DEADLINE = "deadline"  # cannot finish before its deadline
    CAPACITY = "capacity"  # eligible, but no fitting GPUs are free (capacity, headroom, spread, preemption)
    RESERVATION = "reservation"  # GPUs are reserved for it, or starting it would delay a reservation
    NO_CARD = "no_card"  # no card type can run it
    OPERATOR = "operator"  # an operator holds it
    CHECKING = "checking"  # not yet checked (readiness or matching pending)
    CANCELLING = "cancelling"  # a cancel was requested; the dispatcher has not ended it yet


BLOCKER_OF_REASON: Mapping[str, BlockerKind] = {
    ViewReason.AWAITING_READINESS: BlockerKind.CHECKING,
    ViewReason.AWAITING_MATCH: BlockerKind.CHECKING,
    ViewReason.AWAITING_DISPATCH: BlockerKind.RUNNABLE,
    ViewReason.DATA_NOT_READY: BlockerKind.DATA,
    ViewReason.QUEUED: BlockerKind.RUNNABLE,
    ViewReason.LEASED: BlockerKind.RUNNING,
    ViewReason.RUNNING: BlockerKind.RUNNING,
    ViewReason.CANCEL_REQUESTED: BlockerKind.CANCELLING,
    DeferralReason.QUOTA_EXHAUSTED: BlockerKind.QUOTA,
    DeferralReason.QUOTA_EXPIRES: BlockerKind.QUOTA,
    DeferralReason.QUOTA_NOT_YET_VALID: BlockerKind.QUOTA,
    DeferralReason.NO_QUOTA_ACCOUNT: BlockerKind.QUOTA,
    DeferralReason.NOT_APPROVED: BlockerKind.APPROVAL,
    DeferralReason.DEADLINE_UNREACHABLE: BlockerKind.DEADLINE,
    DeferralReason.OPERATOR: BlockerKind.OPERATOR,
    DeferralReason.REPEATEDLY_IDLE: BlockerKind.OPERATOR,  # a person must look at it
    DeferralReason.UNMATCHED: BlockerKind.CHECKING,
    DeferralReason.NO_CAPACITY: BlockerKind.CAPACITY,
    DeferralReason.HEADROOM: BlockerKind.CAPACITY,
    DeferralReason.RESERVED: BlockerKind.RESERVATION,
    DeferralReason.BEHIND_RESERVATION: BlockerKind.RESERVATION,
    DeferralReason.HEAD_OF_LINE: BlockerKind.CAPACITY,
    DeferralReason.AWAITING_PREEMPTION: BlockerKind.CAPACITY,
    DeferralReason.HEAVY_SPREAD: BlockerKind.CAPACITY,
    **{reason.value: BlockerKind.NO_CARD for reason in UnmatchableReason},
    **{reason.value: BlockerKind.RUNNABLE for reason in RequeueReason},  # back in the queue after a run
}
"""Machine reason of an open task -> what it waits for. Terminal reasons are not on the board."""


def blocker_of(view: TaskView) -> BlockerKind:
    """What `view` (an open task) waits for; an unknown reason counts as `checking`, never dropped."""
    return BLOCKER_OF_REASON.get(view.reason, BlockerKind.CHECKING)


@dataclass(frozen=True, slots=True)
class InputWait:
    """One missing input of a task and since when the task waits for it."""

    input: str
    since: datetime


@dataclass(frozen=True, slots=True)
class BoardEntry:
    """One open task on the board."""

    view: TaskView
    blocker: BlockerKind
    waiting_since: datetime | None  # submission time (what the task has waited since)
    inputs: tuple[InputWait, ...] = ()  # for `data`: the missing inputs


@dataclass(frozen=True, slots=True)
class Board:
    """Open tasks grouped by what they wait for, each group oldest first, with counts."""

    groups: Mapping[BlockerKind, tuple[BoardEntry, ...]]
    counts: Mapping[BlockerKind, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def group_board(views: Iterable[TaskView], missing_since: Mapping[str, datetime] | None = None) -> Board:
    """Open tasks of `views` grouped by blocker (terminal ones left out).

    `missing_since[task_id]` is when readiness started waiting for the task's inputs (its submission);
    without it the view's submission time is used.
    """
    since_of = missing_since or {}
    entries: dict[BlockerKind, list[BoardEntry]] = {kind: [] for kind in BlockerKind}
    for view in views:
        if view.is_terminal:
            continue
        kind = blocker_of(view)
        since = since_of.get(view.id, view.submitted_at)
        inputs = tuple(InputWait(ref, since) for ref in view.missing_inputs) if since else ()
        entries[kind].append(BoardEntry(view, kind, since, inputs if kind is BlockerKind.DATA else ()))
    groups = {kind: tuple(sorted(rows, key=_oldest_first)) for kind, rows in entries.items()}
    return Board(groups=groups, counts={kind: len(rows) for kind, rows in groups.items()})


def _oldest_first(entry: BoardEntry) -> tuple[str, str]:
    return (entry.waiting_since.isoformat() if entry.waiting_since else "~", entry.view.id)


WAITING_FOR_GPUS = frozenset({BlockerKind.RUNNABLE, BlockerKind.CAPACITY, BlockerKind.RESERVATION,
                              BlockerKind.QUOTA, BlockerKind.APPROVAL, BlockerKind.DEADLINE, BlockerKind.OPERATOR})  # fmt: skip
"""Blockers of tasks that are in the dispatcher's queue (ready and matched)."""


def queue_order(views: Sequence[TaskView], now: datetime, policy: Policy | None = None) -> list[TaskView]:
    """The queued and held tasks of `views` in the order the dispatcher considers them
    (`shared.scheduling.ordering.order_queue`: class, deadline, priority with aging, submit time, id)."""
    queued = {v.id: v for v in views if not v.is_terminal and blocker_of(v) in WAITING_FOR_GPUS}
    tasks = [_as_queued(view) for view in queued.values()]
    ordered = order_queue(tasks, policy or Policy(), now.timestamp())
    return [queued[task.task_id] for task in ordered]


def _as_queued(view: TaskView) -> QueuedTask:
    deadline = (view.submission or {}).get("deadline")
    return QueuedTask(
        task_id=view.id, project=view.project or "", priority_class=view.priority_class or PriorityClass.STANDARD,
        priority=view.priority or 0, gpus=view.gpus or 1,
        submitted_at=view.submitted_at.timestamp() if view.submitted_at else 0.0, options=(),
        deadline=datetime.fromisoformat(deadline).timestamp() if deadline else None,
    )  # fmt: skip


class Check(StrEnum):
    """One item of a task's pre-flight checklist: what must hold before it can start."""

    DATA = "data"  # every input ready
    CARD = "card"  # a card type matched
    APPROVAL = "approval"  # approved, or no approval needed
    QUOTA = "quota"  # the quota covers it until its estimated end
    DEADLINE = "deadline"  # it can finish before its deadline
    GPUS = "gpus"  # fitting GPUs are free (not held by capacity or a reservation)


_FAILS: Mapping[BlockerKind, Check] = {
    BlockerKind.DATA: Check.DATA, BlockerKind.CHECKING: Check.DATA, BlockerKind.NO_CARD: Check.CARD,
    BlockerKind.APPROVAL: Check.APPROVAL, BlockerKind.QUOTA: Check.QUOTA, BlockerKind.DEADLINE: Check.DEADLINE,
    BlockerKind.CAPACITY: Check.GPUS, BlockerKind.RESERVATION: Check.GPUS,
}  # fmt: skip


def preflight(view: TaskView) -> dict[Check, bool | None]:
    """Each check: True passed, False fails now, None not known yet (an earlier check fails first).

    From the view alone: data and card from the readiness and matcher facets; the other checks
    fail only when the dispatcher's current reason says so.
    """
    failing = _FAILS.get(blocker_of(view))
    result: dict[Check, bool | None] = {}
    for check in Check:
        if check is Check.DATA:
            result[check] = view.ready
        elif check is Check.CARD:
            result[check] = None if view.ready is not True and view.match is None else view.match is not None
        elif view.ready is not True or view.match is None:
            result[check] = None
        else:
            result[check] = check is not failing
    return result
