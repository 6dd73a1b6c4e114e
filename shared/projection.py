"""A task's overall status as a projection of its events: `evolve(view, event) -> view`.

The same pure function serves the console's live read model (`services.console.projector`),
`cardflow tasks/status`, and the audit replay:

    view = None
    for event in events_of_the_task:
        view = evolve(view, event)
    views = fold(events)            # every task at once: {task_id: TaskView}

How it stays correct when events arrive in any cross-producer order:

- Each service owns one facet of a task (intake: the submission, rejection, cancel request;
  readiness: inputs; matcher: card choice; dispatcher: queue, leases, runs; ledger: usage).
  `evolve` only records facts into the facet their owner writes.
- `state`, `reason`, `reason_detail` and `card_type` are DERIVED from the facets after every
  event (`derive_status`), never from arrival order. Readiness arriving before the submission
  gives a partial view (no name yet) whose state is still right.
- `subject_seq` is gap-free per (owning service, subject), so the view keeps the last sequence
  seen per `owner:subject`: a duplicate or an older event of the same owner and subject changes
  nothing. Within one producer events must arrive in order (the stream guarantees it).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from shared.events.carried import fold_order
from shared.events.envelope import Envelope
from shared.events.states import TaskState
from shared.scheduling.model import DeferralReason, WaitKind
from shared.task_view import DispatchStatus, MatchSummary, RejectionProblem, TaskView, ViewReason, output_units_text

_ACTIVE_RUN = frozenset({TaskState.LEASED, TaskState.RUNNING})


# ---- which events are about a task, and who owns them -------------------------------------

_OWNER: dict[str, str] = {
    **dict.fromkeys(("task.submitted", "task.rejected", "task.cancel_requested", "task.flag_cleared"), "intake"),
    "task.readiness_changed": "readiness",
    **dict.fromkeys(("task.matched", "task.unmatchable"), "matcher"),
    **dict.fromkeys(
        (
            "task.queued", "task.held", "task.approved", "lease.granted", "task.started", "task.checkpointed",
            "task.succeeded", "task.failed", "task.requeued", "task.cancelled", "task.released",
            "task.priority_changed",
        ),
        "dispatcher",
    ),
    "usage.recorded": "ledger",
}
"""Event types the projection applies -> the service that owns (emits) them."""

TASK_EVENT_TYPES = frozenset(_OWNER)


def task_id_of(event: Envelope) -> str | None:
    """The task an event changes the view of; None when the projection ignores the event."""
    if event.type not in _OWNER:
        return None
    return event.data.task_id


# ---- evolve / fold ------------------------------------------------------------------------


def evolve(view: TaskView | None, event: Envelope) -> TaskView | None:
    """The view after `event`. Unrelated events return `view` unchanged (the same object), and so
    do duplicates and older events of an owner and subject already applied."""
    task_id = task_id_of(event)
    if task_id is None:
        return view
    if view is None:
        view = TaskView(id=task_id)
    elif view.id != task_id:
        raise ValueError(f"event {event.event_id} is about task {task_id}, not {view.id}")
    key = f"{_OWNER[event.type]}:{event.subject}"
    if event.subject_seq <= view.seqs.get(key, 0):
        return view
    changes = _APPLY[event.type](view, event.data, event)
    changes.update(_bookkeeping(view, event, key))
    updated = view.model_copy(update=changes)
    return updated.model_copy(update=derive_status(updated))


def fold(events: Iterable[Envelope]) -> dict[str, TaskView]:
    """Every task's view after `events` (in the order given)."""
    views: dict[str, TaskView] = {}
    for event in events:
        task_id = task_id_of(event)
        if task_id is not None:
            views[task_id] = evolve(views.get(task_id), event)  # type: ignore[assignment]
    return views


def told_into_views(views: dict[str, TaskView], event: Envelope) -> Iterator[Envelope]:
    """Each event a fold applies for `event` (`shared.events.carried.fold_order`: the usage slices it carries,
    itself, the lease end it carries), each yielded after it is folded into `views` (task views by id, in place):
    the step `shared.replay` and the demo board share before their own rules for leases, usage and nodes."""
    for told in fold_order(event):
        task_id = task_id_of(told)
        if task_id is not None:
            views[task_id] = evolve(views.get(task_id), told)  # type: ignore[assignment]
        yield told


def replay_order(events: Iterable[Envelope]) -> list[Envelope]:
    """`events` with each owner's events per subject in `subject_seq` order, interleaved by time.

    For rebuilding views from an unordered set (e.g. archive segments): `fold(replay_order(x))`.
    """
    streams: dict[str, list[Envelope]] = {}
    for event in events:
        streams.setdefault(f"{_OWNER.get(event.type, event.producer)}:{event.subject}", []).append(event)
    ordered = [sorted(group, key=lambda e: e.subject_seq) for group in streams.values()]
    return list(heapq.merge(*ordered, key=lambda e: e.occurred_at))


def _bookkeeping(view: TaskView, event: Envelope, key: str) -> dict[str, Any]:
    """Sequence, count and the latest event (by time, then type, so arrival order does not matter)."""
    latest = view.last_event_at is None or (event.occurred_at, event.type) > (
        view.last_event_at, view.last_event_type or ""
    )
    return {
        "seqs": {**view.seqs, key: event.subject_seq},
        "events": view.events + 1,
        "last_event_at": event.occurred_at if latest else view.last_event_at,
        "last_event_type": event.type if latest else view.last_event_type,
    }


# ---- derived status -------------------------------------------------------------------------


def derive_status(view: TaskView) -> dict[str, Any]:
    """state, reason, reason_detail and card_type from the facets (independent of arrival order)."""
    state, reason, detail = _status(view)
    if view.cancel_requested and not state.is_terminal:
        why = f" ({view.cancel_reason})" if view.cancel_reason else ""
        reason, detail = ViewReason.CANCEL_REQUESTED.value, f"cancellation requested{why}; was: {detail}"
    card = view.leased_card_type or (view.match.card_type if view.match else None)
    return {"state": state, "reason": reason, "reason_detail": detail, "card_type": card}


def _status(view: TaskView) -> tuple[TaskState, str, str]:
    dispatch = view.dispatch
    if view.problems:
        listed = "; ".join(f"{p.field}: {p.problem}" for p in view.problems)
        return TaskState.REJECTED, ViewReason.REJECTED.value, f"the submission was rejected: {listed}"
    if dispatch and (dispatch.state.is_terminal or dispatch.state in _ACTIVE_RUN or _operator_hold(dispatch)):
        return dispatch.state, dispatch.reason, dispatch.detail
    if view.ready is False:
        return TaskState.WAITING_DATA, ViewReason.DATA_NOT_READY.value, _missing_sentence(view)
    if view.unmatchable is not None:
        return TaskState.UNMATCHABLE, view.unmatchable.reason, view.unmatchable.detail
    if dispatch:
        return dispatch.state, dispatch.reason, dispatch.detail
    if view.ready is None:
        return TaskState.SUBMITTED, ViewReason.AWAITING_READINESS.value, "waiting for the readiness check of its inputs"
    if view.match is None:
        return TaskState.SUBMITTED, ViewReason.AWAITING_MATCH.value, "inputs ready; waiting for the matcher to choose a card type"
    return TaskState.QUEUED, ViewReason.AWAITING_DISPATCH.value, "ready and matched; waiting for the dispatcher to queue it"


def _operator_hold(dispatch: DispatchStatus) -> bool:
    """An operator's hold says more than missing data or a missing card: it is shown first."""
    return dispatch.state is TaskState.HELD and dispatch.reason == DeferralReason.OPERATOR.value


def _missing_sentence(view: TaskView) -> str:
    shown = ", ".join(view.missing_inputs[:5]) + (", ..." if len(view.missing_inputs) > 5 else "")
    share = f" ({view.ready_fraction:.0%} ready)" if view.ready_fraction is not None else ""
    return f"waiting for {len(view.missing_inputs)} input(s){share}: {shown}"


# ---- appliers: (view, data, event) -> field updates ----------------------------------------------

Applier = Callable[[TaskView, Any, Envelope], dict[str, Any]]


def _submitted(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    s = data.submission
    return {
        "name": s.name, "idempotency_key": data.idempotency_key, "project": s.project,
        "priority_class": s.priority_class, "gpus": s.gpus,
        "priority": s.priority if view.priority is None else view.priority,  # an operator's change came first
        "submitted_at": event.occurred_at, "submitted_by": event.actor,
        "template": s.template, "submission": s.model_dump(mode="json", exclude_none=True),
    }


def _rejected(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    problems = tuple(RejectionProblem(field=r.field, value=r.value, problem=r.problem) for r in data.reasons)
    return {
        "name": data.name, "idempotency_key": data.idempotency_key, "project": data.project,
        "problems": problems, "submitted_at": event.occurred_at, "submitted_by": event.actor,
        "finished_at": event.occurred_at,
    }


def _cancel_requested(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    return {"cancel_requested": True, "cancel_reason": data.reason or f"by {event.actor}"}


def _readiness(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    return {
        "ready": data.ready, "ready_fraction": data.ready_fraction,
        "missing_inputs": tuple(str(ref) for ref in data.missing_inputs),
    }


def _matched(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    chosen = next(option for option in data.ranking if option.card_type == data.chosen)
    match = MatchSummary(
        card_type=chosen.card_type, est_runtime_s=chosen.est_runtime_s, est_cost=chosen.est_cost,
        oversized=data.oversized, why=data.reason, alternatives=len(data.ranking) - 1,
    )
    return {"match": match, "unmatchable": None}


def _unmatchable(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    status = DispatchStatus(state=TaskState.UNMATCHABLE, reason=data.reason.value, detail=data.detail)
    return {"match": None, "unmatchable": status}


def _dispatcher(apply: Applier) -> Applier:
    """A dispatcher applier that does nothing once the dispatcher ended the task."""

    def guarded(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
        if view.dispatch is not None and view.dispatch.state.is_terminal:
            return {}
        return apply(view, data, event)

    return guarded


def _status_update(state: TaskState, reason: str, detail: str, **changes: Any) -> dict[str, Any]:
    return {"dispatch": DispatchStatus(state=state, reason=reason, detail=detail), **changes}


def _queued(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    detail = f"in the queue for GPUs ({data.priority_class.value}, priority {data.priority})"
    return _status_update(TaskState.QUEUED, ViewReason.QUEUED.value, detail, **_queue_entry(view, data))


def _queue_entry(view: TaskView, entry: Any) -> dict[str, Any]:
    """What entering the queue records (`task.queued`, or the entry a `lease.granted` carries)."""
    return {
        "project": view.project or entry.project,
        "priority_class": view.priority_class or entry.priority_class,
        "priority": entry.priority if view.priority is None else view.priority,
    }


def _held(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    state = TaskState.HELD if data.reason.kind is WaitKind.HOLD else TaskState.QUEUED  # else: why a queued task waits
    return _status_update(state, data.reason.value, data.detail)


def _approved(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    return {"approved": True}


def _lease_granted(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    gpus = ",".join(str(index) for index in data.gpu_indices)
    detail = f"GPUs {gpus} of node {data.node_id} ({data.card_type}) leased; waiting for the agent to start it"
    already_leased = view.dispatch is not None and view.dispatch.state in _ACTIVE_RUN
    queued = _queue_entry(view, data.queued) if data.queued is not None else {}  # carried: queued, then leased
    return _status_update(
        TaskState.LEASED, ViewReason.LEASED.value, detail,
        lease_id=data.lease_id, node_id=data.node_id, leased_card_type=data.card_type,
        gpu_indices=data.gpu_indices, attempts=view.attempts + (0 if already_leased else 1),
        start_reason=data.start_reason.value if data.start_reason else None, passed=data.passed, **queued,
    )


def _started(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    resumed = f", resumed from {data.resumed_from}" if data.resumed_from else ""
    detail = f"running on node {data.node_id}{resumed}"
    started = _run_start(view, data.lease_id, data.node_id, event)
    return _status_update(TaskState.RUNNING, ViewReason.RUNNING.value, detail, **started)


def _run_start(view: TaskView, lease_id: str, node_id: str, event: Envelope) -> dict[str, Any]:
    """What a run's start records (`task.started`, or the start a `task.succeeded` / `task.failed` carries)."""
    return {"lease_id": lease_id, "node_id": node_id, "started_at": event.occurred_at, "attempts": max(view.attempts, 1)}


def _carried_run_start(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    """What the start a run's end carries records ({} when a `task.started` came first): started, then ended."""
    carried = data.started
    return _run_start(view, data.lease_id, carried.node_id, event) if carried is not None else {}


def _carried_start(data: Any) -> str:
    """The words a run's end that carries its start begins with ("" when a `task.started` came first)."""
    if data.started is None:
        return ""
    resumed = f", resumed from {data.started.resumed_from}" if data.started.resumed_from else ""
    return f"started on node {data.started.node_id}{resumed} and "


def _checkpointed(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    progress = view.progress if data.progress is None else data.progress
    return {"last_checkpoint": data.checkpoint_uri, "progress": progress}


def _succeeded(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    output = "" if data.output_units is None else f"; output {output_units_text(data.output_units)} units"
    started = _carried_run_start(view, data, event)
    finished = f"{_carried_start(data)}finished successfully{output}"
    if data.flags:
        flags = tuple(flag.value for flag in data.flags)
        return _status_update(
            TaskState.SUCCEEDED, ViewReason.SUCCEEDED_FLAGGED.value,
            f"{finished}, but flagged for review ({', '.join(flags)}): {data.flag_detail};"
            " its output is not counted", finished_at=event.occurred_at, progress=1.0, output_units=data.output_units,
            flags=flags, **started,
        )  # fmt: skip
    return _status_update(
        TaskState.SUCCEEDED, ViewReason.SUCCEEDED.value, finished,
        finished_at=event.occurred_at, progress=1.0, output_units=data.output_units, **started,
    )


def _flag_cleared(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    """A person checked a flagged success's output: an ordinary success now (its output counted)."""
    if view.reason != ViewReason.SUCCEEDED_FLAGGED.value:
        return {}
    output = "" if view.output_units is None else f"; output {output_units_text(view.output_units)} units"
    return _status_update(
        TaskState.SUCCEEDED, ViewReason.SUCCEEDED.value,
        f"finished successfully{output}; flagged ({', '.join(view.flags)}), then cleared by {event.actor}"
        f" after checking the output: {data.reason}", flags=(),
    )  # fmt: skip


def _failed(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    code = "" if data.exit_code is None else f" (exit code {data.exit_code})"
    started = _carried_run_start(view, data, event)
    failed = f"{_carried_start(data)}failed: {data.error}{code}" if started else f"{data.error}{code}"
    return _status_update(TaskState.FAILED, ViewReason.FAILED.value, failed, finished_at=event.occurred_at, **started)


def _requeued(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    resume = f"; will resume from {data.resume_from}" if data.resume_from else "; will start over"
    detail = (data.detail or f"lease {data.lease_id} ended ({data.reason.value})") + resume
    return _status_update(
        TaskState.QUEUED, data.reason.value, detail,
        lease_id=None, node_id=None, leased_card_type=None, gpu_indices=(), last_checkpoint=data.resume_from,
    )


def _released(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    detail = f"released by {event.actor}: {data.reason}; back in the queue for GPUs"
    return _status_update(TaskState.QUEUED, ViewReason.QUEUED.value, detail)


def _priority_changed(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    return {"priority": data.priority}


def _cancelled(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    detail = f"cancelled: {data.reason}" if data.reason else "cancelled on request"
    return _status_update(TaskState.CANCELLED, ViewReason.CANCELLED.value, detail, finished_at=event.occurred_at)


def _usage(view: TaskView, data: Any, event: Envelope) -> dict[str, Any]:
    return {"used_gpu_hours": view.used_gpu_hours + data.gpu_seconds / 3600.0, "used_cost": view.used_cost + data.cost}


_APPLY: Mapping[str, Applier] = {
    "task.submitted": _submitted,
    "task.rejected": _rejected,
    "task.cancel_requested": _cancel_requested,
    "task.flag_cleared": _flag_cleared,
    "task.readiness_changed": _readiness,
    "task.matched": _matched,
    "task.unmatchable": _unmatchable,
    "task.queued": _dispatcher(_queued),
    "task.held": _dispatcher(_held),
    "task.approved": _dispatcher(_approved),
    "lease.granted": _dispatcher(_lease_granted),
    "task.started": _dispatcher(_started),
    "task.checkpointed": _dispatcher(_checkpointed),
    "task.succeeded": _dispatcher(_succeeded),
    "task.failed": _dispatcher(_failed),
    "task.requeued": _dispatcher(_requeued),
    "task.cancelled": _dispatcher(_cancelled),
    "task.released": _dispatcher(_released),
    "task.priority_changed": _dispatcher(_priority_changed),
    "usage.recorded": _usage,
}
