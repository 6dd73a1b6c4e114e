"""`LeaseWork`: a fold's working copy of a `LeaseBook`, and the lease verbs every fold shares.

Every fold of the dispatcher (agent reports, the expiry sweep, cancellations, a cycle's plan) reads
the book through a `LeaseWork`, so a later step of the same batch sees the effects of the earlier
ones, and changes it only through these verbs:

- `end_lease`: EVERY lease ends here, exactly once: `lease.released` (after `lease.expired` when
  the TTL ran out; carried by the `task.succeeded` / `task.failed` when the run's end ends it), and the
  task moves as `lease_end.decide_lease_end` says;
- `revoke` / `preempt` / `stop_zombie`: ask an agent to stop a run (once per lease);
- `mark_started`: the first accepted report about a lease says its run is going (`task.started`);
- `renew`: a heartbeat extends the lease; `lease.renewed` is coalesced.

`changes()` returns what changed (`BookChanges`); nothing is written here.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from shared.events import Envelope, LeaseRenewed, LeaseRevoked, TaskHeld, TaskStarted, TaskSucceeded
from shared.events.emission import Emission
from shared.events.reasons import RequeueReason, RevokeReason
from shared.events.reports import PreemptCommand, RevokeCommand
from shared.events.states import TaskState
from shared.events.subjects import agent_subject, lease_subject, task_subject
from shared.leasing.lease_end import NEW_TASK_STATE, EndingLease, LeaseEnd, TaskEffect, Trigger, decide_lease_end
from shared.leasing.lease_end_events import (
    RUN_END_EFFECTS,
    lease_end_events,
    lease_release,
    started_data,
    task_effect_event,
)
from shared.leasing.idle import IdleRule, held_after_reclaim, held_detail
from shared.leasing.records import LeaseBook, LeaseRecord, LeaseState, NodeRecord, TaskRecord
from shared.leasing.report_limits import ReportLimits
from shared.leasing.run_outcome import RunOutcome, run_end
from shared.names import EVENTS_STREAM, agent_inbox
from shared.scheduling.model import DeferralReason

Record = TaskRecord | LeaseRecord | NodeRecord


@dataclass(frozen=True, slots=True)
class LeaseRules:
    """The timings the folds apply (from the dispatcher's configuration)."""

    lease_ttl_s: float = 30.0
    renewal_event_every_s: float = 5.0  # at most one `lease.renewed` per lease per this
    revoke_grace_s: float = 30.0  # time an agent gets to stop a revoked run
    preempt_grace_s: float = 60.0  # time an agent gets to checkpoint and yield
    node_lost_after_s: float = 60.0  # a node silent this long is lost
    claim_after_s: float = 30.0  # reports a failed batch left pending are applied again after this (see outage.py)
    capacity_reason_every_s: float = 10.0  # see `waiting.update_waiting`
    idle: IdleRule = IdleRule()  # the policy's idle reclaim (off unless the policy document turns it on)
    reports: ReportLimits = ReportLimits()  # per-lease report rate caps (the policy's `reports` section)


@dataclass(frozen=True)
class BookChanges:
    """Records a fold changed (to save and keep), and the events and commands it emits.

    `leases`, `tasks`, `nodes` are written; `quiet_leases` are changes only the leader's working
    state keeps (a renewal between two `lease.renewed` events: after a takeover, the new leader
    gives every active lease a fresh TTL). `emissions` lists agent commands first, then events, each
    in the order decided.
    """

    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    leases: dict[str, LeaseRecord] = field(default_factory=dict)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    quiet_leases: dict[str, LeaseRecord] = field(default_factory=dict)
    emissions: tuple[Emission, ...] = ()
    granted: frozenset[str] = frozenset()  # ids of the leases created by this fold (inserted, not updated)

    def __bool__(self) -> bool:
        return bool(self.tasks or self.leases or self.nodes or self.quiet_leases or self.emissions)

    def merge(self, later: BookChanges) -> BookChanges:
        """These changes followed by `later` ones (later records win)."""
        return BookChanges(
            tasks=self.tasks | later.tasks, leases=self.leases | later.leases, nodes=self.nodes | later.nodes,
            quiet_leases={k: v for k, v in (self.quiet_leases | later.quiet_leases).items() if k not in later.leases},
            emissions=_commands_first([*self.emissions, *later.emissions]), granted=self.granted | later.granted,
        )


class LeaseWork:
    """The working copy: reads see this fold's changes first, then the book."""

    def __init__(self, book: LeaseBook, now: datetime, rules: LeaseRules) -> None:
        self.book, self.now, self.rules = book, now, rules
        self._tasks: dict[str, TaskRecord] = {}
        self._leases: dict[str, LeaseRecord] = {}
        self._nodes: dict[str, NodeRecord] = {}
        self._quiet: dict[str, LeaseRecord] = {}
        self._granted: set[str] = set()
        self._emissions: list[Emission] = []

    # -- reading --------------------------------------------------------------------------------

    def task(self, task_id: str) -> TaskRecord | None:
        return self._tasks.get(task_id) or self.book.tasks.get(task_id)

    def lease(self, lease_id: str) -> LeaseRecord | None:
        return self._leases.get(lease_id) or self._quiet.get(lease_id) or self.book.leases.get(lease_id)

    def node(self, node_id: str) -> NodeRecord | None:
        return self._nodes.get(node_id) or self.book.nodes.get(node_id)

    def active_leases(self) -> list[LeaseRecord]:
        """Every active lease, as changed so far, in id order."""
        return self._active({*self.book.active_lease_ids(), *self._leases, *self._quiet})

    def leases_of_task(self, task_id: str) -> list[LeaseRecord]:
        """The task's active leases, in id order."""
        changed = {i for i, lease in self._leases.items() if lease.task_id == task_id}
        return self._active(changed | self.book.active_lease_ids_of_task(task_id))

    def leases_on_node(self, node_id: str) -> list[LeaseRecord]:
        """The node's active leases, in id order."""
        changed = {i for i, lease in self._leases.items() if lease.node_id == node_id}
        return self._active(changed | self.book.active_lease_ids_on_node(node_id))

    def other_parts(self, lease: LeaseRecord) -> list[LeaseRecord]:
        """The other active leases of the same grant (only multi-node grants have any)."""
        if lease.parts <= 1:
            return []
        return [other for other in self.leases_of_task(lease.task_id)
                if other.run == lease.run and other.lease_id != lease.lease_id]

    def _active(self, lease_ids: AbstractSet[str]) -> list[LeaseRecord]:
        leases = (self.lease(lease_id) for lease_id in sorted(lease_ids))
        return [lease for lease in leases if lease is not None and lease.active]

    def require_task(self, task_id: str) -> TaskRecord:
        task = self.task(task_id)
        if task is None:
            raise LookupError(f"task {task_id} of a lease is not in the dispatcher's book")
        return task

    # -- changing -------------------------------------------------------------------------------

    def put(self, record: Record) -> None:
        """Keep a changed record (it will be saved)."""
        if isinstance(record, LeaseRecord):
            self._quiet.pop(record.lease_id, None)
            self._leases[record.lease_id] = record
        elif isinstance(record, TaskRecord):
            self._tasks[record.task_id] = record
        else:
            self._nodes[record.node_id] = record

    def put_quietly(self, lease: LeaseRecord) -> None:
        """Keep a changed lease in the working state only (see `BookChanges.quiet_leases`)."""
        if lease.lease_id in self._leases:
            self._leases[lease.lease_id] = lease
        else:
            self._quiet[lease.lease_id] = lease

    def grant(self, lease: LeaseRecord) -> None:
        """A new lease (inserted when saved)."""
        self._granted.add(lease.lease_id)
        self.put(lease)

    def emit(self, event_type: type[Envelope], subject: str, data: Any, *, cause: Envelope | None = None,
             stream: str = EVENTS_STREAM) -> None:
        self._emissions.append(Emission(event_type, subject, data, cause=cause, occurred_at=self.now, stream=stream))

    def changes(self) -> BookChanges:
        return BookChanges(
            tasks=dict(self._tasks), leases=dict(self._leases), nodes=dict(self._nodes), quiet_leases=dict(self._quiet),
            emissions=_commands_first(self._emissions), granted=frozenset(self._granted),
        )

    # -- the verbs ------------------------------------------------------------------------------

    def end_lease(self, lease: LeaseRecord, trigger: Trigger, cause: Envelope | None = None,
                  outcome: RunOutcome = RunOutcome()) -> LeaseEnd:
        """End an ACTIVE lease: free its GPUs, emit its end, move its task (see the module docstring)."""
        if not lease.active:
            raise ValueError(f"lease {lease.lease_id} has already ended ({lease.end_reason})")
        task, others = self.require_task(lease.task_id), self.other_parts(lease)
        decision = decide_lease_end(_ending(lease, task, len(others)), trigger, outcome.exit_code, outcome.error)
        ended_at = run_end(lease, outcome, self.now)
        self.put(replace(lease, state=LeaseState.ENDED, ended_at=ended_at, end_reason=decision.release))
        release = lease_release(lease, decision, ended_at)
        carried = decision.effect in RUN_END_EFFECTS  # the run's end carries its lease's end
        end_events = lease_end_events(lease, trigger, None if carried else release)
        if decision.effect is not TaskEffect.NONE:
            end_events.append(task_effect_event(lease, task, decision, outcome, release if carried else None))
        for event in end_events:
            self.emit(event.event_type, event.subject, event.data, cause=cause)
        if decision.effect is not TaskEffect.NONE:
            flags = task.flags | set(outcome.flags) if decision.effect is TaskEffect.SUCCEED else task.flags
            self.put(replace(task, state=NEW_TASK_STATE[decision.effect], deferral_reason=None, deferral_detail=None,
                             updated_at=self.now, flags=flags))
            if decision.requeue_reason is RequeueReason.RECLAIMED_IDLE:
                self._count_reclaim(task, cause)
        if trigger is Trigger.EXPIRED and (node := self.node(lease.node_id)) is not None:
            self.put(replace(node, lease_expired_at=self.now))
        if decision.revoke_other_parts and others:
            reason = RevokeReason.CANCELLED if decision.effect is TaskEffect.CANCEL else RevokeReason.SUPERSEDED
            self.revoke(others, reason, "another part of the task ended", cause=cause)
        return decision

    def _count_reclaim(self, task: TaskRecord, cause: Envelope | None) -> None:
        """One more idle reclaim of the task; at the policy's `hold_after`, it is held for a person."""
        task = replace(self.require_task(task.task_id), reclaims=task.reclaims + 1)
        if held_after_reclaim(task.reclaims, self.rules.idle):
            detail = held_detail(task.reclaims)
            task = replace(task, state=TaskState.HELD, deferral_reason=DeferralReason.REPEATEDLY_IDLE,
                           deferral_detail=detail, queued_announced=False)
            self.emit(TaskHeld, task_subject(task.task_id), {
                "task_id": task.task_id, "reason": DeferralReason.REPEATEDLY_IDLE, "detail": detail}, cause=cause)
        self.put(task)

    def revoke(self, leases: Iterable[LeaseRecord], reason: RevokeReason, detail: str, *,
               cause: Envelope | None = None) -> list[str]:
        """Ask the agents to stop these active leases (once per lease); each ends when its agent reports."""
        revoked = []
        for lease_id in sorted({lease.lease_id for lease in leases}):
            lease = self.lease(lease_id)
            if lease is None or not lease.active or lease.revoke_reason is not None or lease.preempting:
                continue
            self.put(replace(lease, revoke_reason=reason))
            self.emit(RevokeCommand, agent_subject(lease.agent_id), _order(lease) | {
                "reason": reason, "grace_s": self.rules.revoke_grace_s, "detail": detail,
            }, cause=cause, stream=agent_inbox(lease.agent_id))
            self.emit(LeaseRevoked, lease_subject(lease_id), {
                "lease_id": lease_id, "task_id": lease.task_id, "reason": reason, "detail": detail,
            }, cause=cause)
            revoked.append(lease_id)
        return revoked

    def preempt(self, lease_id: str, for_task_id: str, detail: str) -> bool:
        """Order the agent to checkpoint and yield the lease's GPUs to `for_task_id` (once per lease)."""
        lease = self.lease(lease_id)
        if lease is None or not lease.active or lease.preempting or lease.revoke_reason is not None:
            return False
        self.put(replace(lease, preempting=True, preempted_for=for_task_id))
        self.emit(PreemptCommand, agent_subject(lease.agent_id), _order(lease) | {
            "grace_s": self.rules.preempt_grace_s, "detail": detail,
        }, stream=agent_inbox(lease.agent_id))
        self.emit(LeaseRevoked, lease_subject(lease_id), {
            "lease_id": lease_id, "task_id": lease.task_id, "reason": RevokeReason.PREEMPTED, "detail": detail,
        })
        return True

    def stop_zombie(self, lease: LeaseRecord) -> None:
        """The holding agent still runs a lease that ENDED (it expired during a partition): its GPUs may
        be leased to someone else now, so the agent is told to stop that run, once per lease."""
        if lease.active or lease.revoke_reason is not None:
            return
        self.put(replace(lease, revoke_reason=RevokeReason.SUPERSEDED))
        self.emit(RevokeCommand, agent_subject(lease.agent_id), _order(lease) | {
            "reason": RevokeReason.SUPERSEDED, "grace_s": self.rules.revoke_grace_s,
            "detail": "the lease ended; its GPUs may be leased again",
        }, stream=agent_inbox(lease.agent_id))

    def reconcile_late_success(self, lease: LeaseRecord, report: Envelope, outcome: RunOutcome) -> None:
        """A clean finish of a lease that had EXPIRED (`late_report.reconcilable`): the task succeeded
        with that run; a newer run of it, if one was granted meanwhile, is revoked (superseded)."""
        task = self.require_task(lease.task_id)
        newer = [other for other in self.leases_of_task(task.task_id) if other.run != lease.run]
        self.put(replace(task, state=TaskState.SUCCEEDED, deferral_reason=None, deferral_detail=None,
                         updated_at=self.now, flags=task.flags | set(outcome.flags)))
        self.emit(TaskSucceeded, task_subject(task.task_id), outcome.succeeded_data(task.task_id, lease.lease_id),
                  cause=report)
        self.revoke(newer, RevokeReason.SUPERSEDED,
                    f"an earlier run (lease {lease.lease_id}) finished; its report came after that lease had expired",
                    cause=report)

    def mark_started(self, lease: LeaseRecord, cause: Envelope) -> None:
        """The first accepted report about a lease means its run started (`task.started` once)."""
        lease = self.lease(lease.lease_id) or lease
        if lease.started:
            return
        self.put(replace(lease, started=True))
        task = self.require_task(lease.task_id)
        if lease.run == task.run and task.state is TaskState.LEASED:
            self.put(replace(task, state=TaskState.RUNNING, updated_at=self.now))
            self.emit(TaskStarted, task_subject(task.task_id), started_data(lease), cause=cause)

    def renew(self, leases: Iterable[LeaseRecord], cause: Envelope, heard_at: datetime | None = None) -> None:
        """Extend each lease by its TTL; at most one `lease.renewed` per lease per `renewal_event_every_s`,
        counting the heartbeats it stands for. Renewals in between stay in the working state only.
        `heard_at`: when `cause` reached `cf:reports`, no later than now (default: now); it moves
        `last_heard_at` forward only."""
        quiet_since = self.now - timedelta(seconds=self.rules.renewal_event_every_s)
        heard = heard_at or self.now
        for lease_id in sorted({lease.lease_id for lease in leases}):
            lease = self.lease(lease_id)
            assert lease is not None
            renewed = replace(lease, expires_at=self.now + timedelta(seconds=lease.ttl_s), last_renewed_at=self.now,
                              last_heard_at=max(heard, lease.last_heard_at or heard),
                              renewals_unreported=lease.renewals_unreported + 1)
            if lease.renewal_reported_at is not None and lease.renewal_reported_at > quiet_since:
                self.put_quietly(renewed)
                continue
            self.emit(LeaseRenewed, lease_subject(lease_id), {
                "lease_id": lease_id, "task_id": lease.task_id, "until": renewed.expires_at,
                "heard_at": renewed.last_heard_at,
                "heartbeats": renewed.renewals_unreported, "idle_gpu_seconds": renewed.idle_gpu_seconds,
                "gpu_util_pct": renewed.util_pct_sum / renewed.util_readings if renewed.util_readings else None,
            }, cause=cause)
            self.put(replace(renewed, renewals_unreported=0, renewal_reported_at=self.now, util_pct_sum=0.0,
                             util_readings=0, idle_gpu_seconds=0.0))


def _ending(lease: LeaseRecord, task: TaskRecord, others: int) -> EndingLease:
    return EndingLease(
        preempting=lease.preempting, revoke_reason=lease.revoke_reason, current_run=lease.run == task.run,
        task_state=task.state, cancel_requested=task.cancel_requested, other_parts_active=others,
    )


def _order(lease: LeaseRecord) -> dict[str, Any]:
    return {"agent_id": lease.agent_id, "lease_id": lease.lease_id, "task_id": lease.task_id,
            "fencing_token": lease.fencing_token}


def _commands_first(emissions: list[Emission]) -> tuple[Emission, ...]:
    """Agent commands before events (stable): the relay publishes the outbox in batches, and a grant's
    command is what the freed GPU waits for. Commands and events never share a subject (`agent/<id>`
    is only used on agent inboxes), so every subject keeps its order."""
    return tuple(sorted(emissions, key=lambda e: e.stream == EVENTS_STREAM))
