"""`cardflow audit why TASK`: the whole story of a task from the archive (pure).

    story = tell(task_id, archived)    # archived: the task's events in archive order

Each step is one archived event told as a sentence, with its time, actor and run (a transition an
event carries for another — a queue entry on a grant, a run's start on its success — is a step of
its own just before it, and each of the task's usage slices a `usage.batch_recorded` carries a step of
its own, `shared.events.carried`): submission
(project, template, resolved fields), readiness (which inputs were missing, when they came),
match (chosen card, every alternative with its runtime and cost, catalog version), every deferral
with the dispatcher's own sentence, grants (node, GPUs, policy version when recorded),
preemptions and revocations (why and for whom), checkpoints, renewals (folded into their run),
usage, the end and its output. Runs group what happened under each grant, so a task preempted
and resumed shows two runs, the second resuming from the first one's checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from services.audit.reading import ArchivedEvent
from shared.events import Envelope
from shared.events.carried import USAGE_CARRIER, carried_events, carried_usage
from shared.projection import evolve
from shared.task_view import TaskView, output_units_text
from shared.replay import exact


@dataclass(frozen=True, slots=True)
class StoryStep:
    """One event of the story."""

    seq: int
    event_id: str
    at: datetime
    actor: str
    type: str
    run: int | None
    sentence: str
    reason: str | None = None
    event: Envelope | None = field(default=None, compare=False, repr=False)
    """The archived event told (so a reader can tell it again in another language)."""


@dataclass
class StoryRun:
    """One grant of GPUs and what became of it (several leases when a grant spans nodes)."""

    number: int
    lease_ids: list[str] = field(default_factory=list)
    node_ids: list[str] = field(default_factory=list)
    card_type: str | None = None
    gpus: int = 0
    granted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end_reason: str | None = None
    resumed_from: str | None = None
    stopped_by: str | None = None
    checkpoints: int = 0
    renewals: int = 0
    gpu_seconds: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    output_units: float | None = None
    held_output_units: float | None = None
    """A flagged success's output, counted only once a person clears the flag (`task.flag_cleared`)."""


@dataclass
class Story:
    task_id: str
    view: TaskView | None
    steps: list[StoryStep] = field(default_factory=list)
    runs: list[StoryRun] = field(default_factory=list)
    match: dict[str, Any] | None = None
    submission: dict[str, Any] | None = None

    @property
    def gpu_hours(self) -> float:
        return float(sum((run.gpu_seconds for run in self.runs), Decimal(0)) / 3600)

    @property
    def cost(self) -> float:
        return float(sum((run.cost for run in self.runs), Decimal(0)))

    @property
    def output_units(self) -> float | None:
        outputs = [run.output_units for run in self.runs if run.output_units is not None]
        return sum(outputs) if outputs else None


def tell(task_id: str, archived: Sequence[ArchivedEvent]) -> Story:
    """The story of `task_id` from its archived events (its own and its leases')."""
    teller = _Teller(Story(task_id=task_id, view=None))
    for item in archived:
        teller.add(item)
    return teller.story


class _Teller:
    def __init__(self, story: Story) -> None:
        self.story = story
        self.run_of_lease: dict[str, StoryRun] = {}
        self.last_grant: tuple[datetime, str | None] | None = None

    def add(self, item: ArchivedEvent) -> None:
        event = item.event
        self.story.view = evolve(self.story.view, event) or self.story.view
        if event.type == "lease.renewed":
            self._run(event).renewals += event.data.heartbeats  # folded into the run, not a step
            return
        if event.type == USAGE_CARRIER:  # a batch's usage: this task's slices, each told as its own event
            for piece in carried_usage(event, self.story.task_id):
                self.story.view = evolve(self.story.view, piece) or self.story.view
                self._step(item.seq, piece)
            return
        told = _TELL.get(event.type)
        if told is None:
            return
        for carried in carried_events(event):  # a transition that rode on this event, told first
            self._step(item.seq, carried)
        self._step(item.seq, event)

    def _step(self, seq: int, event: Envelope) -> None:
        sentence, reason = _TELL[event.type](self, event)
        run = self.run_of_lease.get(getattr(event.data, "lease_id", None) or "")
        self.story.steps.append(StoryStep(seq, event.event_id, event.occurred_at, event.actor, event.type,
                                     run.number if run else None, sentence, reason, event))  # fmt: skip

    def _run(self, event: Envelope) -> StoryRun:
        lease_id = event.data.lease_id
        run = self.run_of_lease.get(lease_id)
        if run is None:
            run = self._new_run(event)
            run.lease_ids.append(lease_id)
            self.run_of_lease[lease_id] = run
        return run

    def _new_run(self, event: Envelope) -> StoryRun:
        """A lease of the same grant (same time and cause) joins the run; any other starts one."""
        key = (event.occurred_at, event.causation_id)
        if event.type == "lease.granted" and self.last_grant == key and self.story.runs:
            return self.story.runs[-1]
        if event.type == "lease.granted":
            self.last_grant = key
        run = StoryRun(number=len(self.story.runs) + 1)
        self.story.runs.append(run)
        return run


# ---- one sentence per event type: (teller, event) -> (sentence, reason) ---------------------------

Told = tuple[str, str | None]


def _submitted(t: _Teller, e: Envelope) -> Told:
    s = e.data.submission
    t.story.submission = s.model_dump(mode="json")
    via = f" from template {s.template}" if s.template else ""
    vram = f" of at least {s.min_vram_gb:g} GB" if s.min_vram_gb else ""
    scenario = f", scenario {s.labels['scenario']}" if "scenario" in s.labels else ""
    return (f"submitted{via}: {s.name!r} in project {s.project}{scenario}, {s.priority_class.value} priority"
            f" {s.priority}, {s.gpus} GPU(s){vram}, {s.profile.value}, estimate {s.estimate_gpu_hours:g} GPU-h,"
            f" {len(s.inputs)} input(s)", None)  # fmt: skip


def _rejected(t: _Teller, e: Envelope) -> Told:
    problems = "; ".join(f"{r.field}: {r.problem}" for r in e.data.reasons)
    return f"rejected by intake: {problems}", "rejected"


def _cancel_requested(t: _Teller, e: Envelope) -> Told:
    why = f": {e.data.reason}" if e.data.reason else ""
    return f"cancellation requested by {e.actor}{why}", "cancel_requested"


def _flag_cleared(t: _Teller, e: Envelope) -> Told:
    for run in t.story.runs:  # as the ledger: the held-back output now counts
        if run.held_output_units is not None:
            run.output_units, run.held_output_units = run.held_output_units, None
    return f"flagged success cleared by {e.actor} after checking its output: {e.data.reason}", "flag_cleared"


def _readiness(t: _Teller, e: Envelope) -> Told:
    d = e.data
    if d.ready:
        return "every input is ready", None
    missing = ", ".join(str(ref) for ref in d.missing_inputs[:5]) + (" …" if len(d.missing_inputs) > 5 else "")
    return f"waiting for data: {len(d.missing_inputs)} input(s) missing ({d.ready_fraction:.0%} ready): {missing}", "data_not_ready"


def _data_ready(t: _Teller, e: Envelope) -> Told:
    d = e.data
    where = f" at {d.location}" if d.location else ""
    source = f" ({d.source})" if d.source else ""
    return f"input {d.input} signalled ready by {e.actor}{where}{source}", None


def _matched(t: _Teller, e: Envelope) -> Told:
    d = e.data
    chosen = next(o for o in d.ranking if o.card_type == d.chosen)
    others = [o for o in d.ranking if o.card_type != d.chosen]
    t.story.match = {
        "chosen": d.chosen, "reason": d.reason, "oversized": d.oversized, "catalog_version": d.catalog_version,
        "ranking": [o.model_dump(mode="json") for o in d.ranking],
    }  # fmt: skip
    alternatives = "; ".join(f"{o.card_type} {_hours(o.est_runtime_s)} {o.est_cost:.2f}" for o in others) or "none"
    catalog = f", catalog version {d.catalog_version}" if d.catalog_version else ""
    oversized = " (oversized)" if d.oversized else ""
    return (f"matched to {d.chosen}{oversized}: est. {_hours(chosen.est_runtime_s)}, cost {chosen.est_cost:.2f}"
            f" — {d.reason}; alternatives: {alternatives}{catalog}", None)  # fmt: skip


def _unmatchable(t: _Teller, e: Envelope) -> Told:
    return f"no card type fits: {e.data.detail}", e.data.reason.value


def _queued(t: _Teller, e: Envelope) -> Told:
    return f"queued for GPUs ({e.data.priority_class.value}, priority {e.data.priority})", "queued"


def _held(t: _Teller, e: Envelope) -> Told:
    return f"deferred ({e.data.reason.value}): {e.data.detail}", e.data.reason.value


def _approved(t: _Teller, e: Envelope) -> Told:
    note = f": {e.data.note}" if e.data.note else ""
    return f"approved by {e.actor}{note}", None


def _granted(t: _Teller, e: Envelope) -> Told:
    d = e.data
    run = t._run(e)
    run.node_ids.append(d.node_id)
    run.card_type, run.gpus = d.card_type, run.gpus + len(d.gpu_indices)
    run.granted_at = run.granted_at or e.occurred_at
    run.resumed_from = d.resume_from
    resume = f", resuming from {d.resume_from}" if d.resume_from else ", from the start"
    policy = getattr(d, "policy_version", None)
    version = f", policy version {policy}" if policy else ""
    clock = f", a simulated node (×{d.time_scale:g} the wall clock)" if d.time_scale != 1.0 else ""
    filler = ", as a filler of the burst headroom (yields it to core work at once)" if d.borrowed_headroom else ""
    gpus = ",".join(map(str, d.gpu_indices))
    return (f"run {run.number}: GPUs {gpus} of node {d.node_id} ({d.card_type}) granted, lease {d.lease_id},"
            f" fencing token {d.fencing_token}{resume}{version}{clock}{filler}", None)  # fmt: skip


def _started(t: _Teller, e: Envelope) -> Told:
    run = t._run(e)
    run.started_at = run.started_at or e.occurred_at
    resumed = f", resumed from {e.data.resumed_from}" if e.data.resumed_from else ""
    return f"running on node {e.data.node_id}{resumed}", None


def _checkpointed(t: _Teller, e: Envelope) -> Told:
    d = e.data
    run = t._run(e)
    run.checkpoints += 1
    if d.output_units is not None:
        run.output_units = max(run.output_units or 0.0, d.output_units)
    progress = f" at {d.progress:.0%}" if d.progress is not None else ""
    output = f", {output_units_text(d.output_units)} units so far" if d.output_units is not None else ""
    return f"checkpoint {d.checkpoint_uri}{progress}{output}", None


def _revoked(t: _Teller, e: Envelope) -> Told:
    d = e.data
    t._run(e).stopped_by = f"{e.actor}: {d.detail}" if d.detail else e.actor
    detail = f": {d.detail}" if d.detail else ""
    verb = "preempted" if d.reason.value == "preempted" else f"revoked ({d.reason.value})"
    return f"lease {d.lease_id} {verb} by {e.actor}{detail}", d.reason.value


def _expired(t: _Teller, e: Envelope) -> Told:
    last = e.data.last_renewed_at
    renewed = f"; last renewed {last.isoformat()}" if last else "; never renewed"
    return f"lease {e.data.lease_id} expired: the agent stopped renewing it{renewed}", "lease_expired"


def _released(t: _Teller, e: Envelope) -> Told:
    d = e.data
    run = t._run(e)
    run.ended_at, run.end_reason = d.ended_at, d.reason.value
    held = (d.ended_at - d.granted_at).total_seconds()
    return f"lease {d.lease_id} released ({d.reason.value}) after {_hours(held)} on {d.gpus} GPU(s)", d.reason.value


def _usage(t: _Teller, e: Envelope) -> Told:
    d = e.data
    run = t._run(e)
    run.gpu_seconds += exact(d.gpu_seconds)
    run.cost += exact(d.cost)
    return f"charged {d.gpu_seconds / 3600:.4f} GPU-h ({d.card_type}), cost {d.cost:.4f} to project {d.project}", None


def _requeued(t: _Teller, e: Envelope) -> Told:
    d = e.data
    resume = f"; will resume from {d.resume_from}" if d.resume_from else "; will start over"
    detail = f": {d.detail}" if d.detail else ""
    return f"requeued ({d.reason.value}){detail}{resume}", d.reason.value


def _succeeded(t: _Teller, e: Envelope) -> Told:
    run, d = t._run(e), e.data
    output = f", output {output_units_text(d.output_units)} units" if d.output_units is not None else ""
    if d.flags:  # the ledger counts no output of a flagged run: neither does the story (until it is cleared)
        held = [units for units in (run.output_units, d.output_units) if units is not None]
        run.output_units, run.held_output_units = None, (max(held) if held else None)
        flags = ", ".join(flag.value for flag in d.flags)
        claimed = f" (claimed {output_units_text(d.claimed_output_units)}, refused)" if d.claimed_output_units is not None else ""
        return (f"succeeded{output}{claimed}, FLAGGED for review ({flags}): {d.flag_detail}; its output is not counted",
                d.flags[0].value)
    if d.output_units is not None:
        run.output_units = max(run.output_units or 0.0, d.output_units)
    return f"succeeded{output}", "succeeded"


def _failed(t: _Teller, e: Envelope) -> Told:
    code = f" (exit code {e.data.exit_code})" if e.data.exit_code is not None else ""
    return f"failed: {e.data.error}{code}", "failed"


def _cancelled(t: _Teller, e: Envelope) -> Told:
    why = f": {e.data.reason}" if e.data.reason else ""
    return f"cancelled{why}", "cancelled"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds:.0f} s"


_TELL: dict[str, Callable[[_Teller, Envelope], Told]] = {
    "task.submitted": _submitted, "task.rejected": _rejected, "task.cancel_requested": _cancel_requested,
    "task.flag_cleared": _flag_cleared, "task.readiness_changed": _readiness, "data.ready_signalled": _data_ready,
    "task.matched": _matched, "task.unmatchable": _unmatchable,
    "task.queued": _queued, "task.held": _held, "task.approved": _approved, "lease.granted": _granted,
    "task.started": _started, "task.checkpointed": _checkpointed, "lease.revoked": _revoked,
    "lease.expired": _expired, "lease.released": _released, "usage.recorded": _usage,
    "task.requeued": _requeued, "task.succeeded": _succeeded, "task.failed": _failed, "task.cancelled": _cancelled,
}  # fmt: skip


def story_json(story: Story) -> dict[str, Any]:
    """The story as JSON-ready values (the API's and `--json`'s shape)."""
    view = story.view
    return {
        "task_id": story.task_id,
        "state": view.state.value if view else None, "reason": view.reason if view else None,
        "name": view.name if view else None, "project": view.project if view else None,
        "submitted_by": view.submitted_by if view else None,
        "gpu_hours": story.gpu_hours, "cost": story.cost, "output_units": story.output_units,
        "submission": story.submission, "match": story.match,
        "runs": [_run_json(run) for run in story.runs],
        "steps": [{"seq": s.seq, "event_id": s.event_id, "at": s.at.isoformat(), "actor": s.actor, "type": s.type,
                   "run": s.run, "sentence": s.sentence, "reason": s.reason} for s in story.steps],
    }  # fmt: skip


def _run_json(run: StoryRun) -> dict[str, Any]:
    at = lambda value: value.isoformat() if value else None  # noqa: E731
    return {
        "run": run.number, "lease_ids": run.lease_ids, "node_ids": run.node_ids, "card_type": run.card_type,
        "gpus": run.gpus, "granted_at": at(run.granted_at), "started_at": at(run.started_at),
        "ended_at": at(run.ended_at), "end_reason": run.end_reason, "resumed_from": run.resumed_from,
        "stopped_by": run.stopped_by, "checkpoints": run.checkpoints, "renewals": run.renewals,
        "gpu_hours": float(run.gpu_seconds / 3600), "cost": float(run.cost), "output_units": run.output_units,
    }  # fmt: skip
