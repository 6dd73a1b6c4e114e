"""`apply_reports`: what a batch of agent reports means — a pure fold over the dispatcher's records.

    effects = apply_reports(book, reports, now, rules)   # no I/O: the handler loads and saves

Reports are applied in order, each seeing the effects of the earlier ones. EVERY claim a report
makes about a lease is screened first (`screening.screen_claim`: fencing, then any further rule);
a refused claim becomes a `RejectedReport` and has no effect. Of several checkpoint (or progress)
reports about one lease in one batch only the last is applied (the others are `coalesced`: not
applied, only counted, as the last one says more); `rate_limited` refusals are counted into one
`RejectedReport` per lease and batch (a storm of them is one row). Accepted reports:

- `report.registered`: the node is recorded (`node.registered` when new or changed); of the active
  leases on the node, those the agent lists with the right token are kept and renewed, those
  granted after the agent process started are left alone (their grant may still be on its way),
  and every other one is lost with the old agent process: it ends at once (`lease.released
  (revoked)`, task requeued `agent_failed` from its last checkpoint) instead of waiting for its TTL;
- `report.heartbeat`: the node is seen (a lost node is back: `node.registered`), GPU utilisation is
  kept, every listed lease is renewed (`LeaseWork.renew`: it was held when the heartbeat reached
  `cf:reports`, `arrived`, which bounds what its finish is charged) and its run counts as started;
  a listed lease that already ended is a zombie run: the agent is told once to stop it; each lease's
  utilisation is observed (`idle.observe`) and a lease idle for the policy's window is revoked
  `reclaimed_idle` (checkpoint first);
- `report.progress` / `report.checkpointed`: the run has started (`task.started` once); progress
  and output are kept — output beyond the policy's bound is not (`plausibility.refused_output`:
  that claim alone is refused `output_out_of_bounds`, counted like `rate_limited`); a checkpoint
  of the task's current run becomes its `resume_from` (`task.checkpointed`);
- `report.finished`: the lease ends (`LeaseWork.end_lease`, rules in `lease_end.decide_lease_end`),
  charged up to the run's end as the agent saw it (`work.run_end`). A clean finish is judged first
  (`plausibility.judge_success`): a success too early for the task's estimate, or with output
  beyond the bound, still ends the task succeeded, FLAGGED (`task.succeeded.flags`, the task's
  `flags`), out-of-bounds output refused. A clean finish refused only because its lease had
  EXPIRED is reconciled instead (`late_report.reconcilable`, judged alike): the task succeeded with
  that run and is not run again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from shared.events import NodeRegistered, TaskCheckpointed
from shared.events.reports import AgentRegistered, AgentReport, Heartbeat, TaskFinished, TaskProgress
from shared.events.reports import TaskCheckpointed as CheckpointReport
from shared.events.subjects import node_subject, task_subject
from shared.events.reasons import RevokeReason
from shared.leasing.fencing import LeaseClaim, Refusal, Rejection
from shared.leasing.late_report import reconcilable
from shared.leasing.idle import due_for_reclaim, lease_utilisation, observe, reclaim_detail
from shared.leasing.lease_end import Trigger, succeeded
from shared.leasing.plausibility import judge_success, refused_output
from shared.leasing.records import LeaseBook, LeaseRecord, NodeRecord
from shared.leasing.screening import admit, screen_claim
from shared.leasing.run_outcome import RunOutcome
from shared.leasing.work import BookChanges, LeaseRules, LeaseWork


@dataclass(frozen=True, slots=True)
class RejectedReport:
    """A report (or one claim of it) that was refused, with why."""

    report_id: str  # the last one, when several are counted together
    report_type: str
    agent_id: str
    lease_id: str | None
    fencing_token: int | None
    refusal: Refusal
    count: int = 1  # reports refused alike (`COUNTED` reasons only; one lease, one batch)


COUNTED = frozenset({Rejection.RATE_LIMITED, Rejection.OUTPUT_OUT_OF_BOUNDS})
"""Refusals a misbehaving agent can cause by the thousand: counted, not recorded one by one."""


@dataclass(frozen=True, slots=True)
class GpuReading:
    """The last utilisation a GPU reported."""

    node_id: str
    gpu_index: int
    util_pct: float
    memory_used_gb: float | None
    reported_at: datetime


@dataclass(frozen=True)
class ReportEffects:
    """What a batch of reports changes."""

    changes: BookChanges
    rejected: tuple[RejectedReport, ...] = ()
    utilisation: tuple[GpuReading, ...] = ()
    capacity_changed: bool = False  # GPUs freed or a node came (back): worth a cycle
    coalesced: int = 0  # checkpoint / progress reports a later one of the same batch superseded


def apply_reports(leases: LeaseBook, reports: Sequence[AgentReport], now: datetime, config: LeaseRules,
                  arrived: Mapping[str, datetime] | None = None) -> ReportEffects:
    """Fold `reports` (in order) over `leases`; see the module docstring. `arrived`: when each report
    (by event id) reached `cf:reports`; a report not in it counts as heard `now`."""
    fold = _ReportFold(LeaseWork(leases, now, config), superseded_in_batch(reports), arrived or {})
    for report in reports:
        fold.apply(report)
    return ReportEffects(fold.work.changes(), tuple(fold.rejected), tuple(fold.utilisation.values()),
                         fold.capacity_changed, fold.coalesced)


def claims_of(report: AgentReport) -> list[LeaseClaim]:
    """Every lease claim a report makes (heartbeats and registrations may make several)."""
    d = report.data
    if isinstance(report, Heartbeat | AgentRegistered):
        held = d.leases if isinstance(report, Heartbeat) else d.held_leases
        return [LeaseClaim(d.agent_id, h.lease_id, h.task_id, h.fencing_token) for h in held]
    return [LeaseClaim(d.agent_id, d.lease_id, d.task_id, d.fencing_token)]


def superseded_in_batch(reports: Sequence[AgentReport]) -> frozenset[str]:
    """Ids of checkpoint / progress reports followed, in the same batch, by one of the same kind about the same lease."""
    last: dict[tuple[str, str], str] = {}
    for report in reports:
        if isinstance(report, CheckpointReport | TaskProgress):
            last[(report.type, report.data.lease_id)] = report.event_id
    kept = set(last.values())
    return frozenset(r.event_id for r in reports if isinstance(r, CheckpointReport | TaskProgress) and r.event_id not in kept)


class _ReportFold:
    """The running state of one batch: the working copy, rejections, readings."""

    def __init__(self, work: LeaseWork, superseded: frozenset[str] = frozenset(),
                 arrived: Mapping[str, datetime] | None = None) -> None:
        self.work = work
        self.superseded = superseded
        self.arrived = arrived or {}
        self.rejected: list[RejectedReport] = []
        self._counted: dict[tuple[str | None, Rejection], int] = {}  # -> index in `rejected`
        self.coalesced = 0
        self.utilisation: dict[tuple[str, int], GpuReading] = {}
        self.capacity_changed = False

    def apply(self, report: AgentReport) -> None:
        if isinstance(report, Heartbeat):
            self.heartbeat(report)
        elif isinstance(report, TaskFinished):
            self.finished(report)
        elif isinstance(report, CheckpointReport):
            self.checkpointed(report)
        elif isinstance(report, TaskProgress):
            self.progressed(report)
        elif isinstance(report, AgentRegistered):
            self.registered(report)

    # -- screening ------------------------------------------------------------------------------

    def screen(self, claim: LeaseClaim, report: AgentReport, lease: LeaseRecord | None) -> Refusal | None:
        """`screening.screen_claim` with the lease's node."""
        node = self.work.node(lease.node_id) if lease is not None else None
        return screen_claim(claim, report, lease, node, self.work.now, self.work.rules)

    def accepted(self, report: AgentReport, claims: Sequence[LeaseClaim]) -> list[LeaseRecord]:
        """The leases of the claims that pass screening (the rate cap's allowance used); the others are
        rejected, except a report a later one of the batch supersedes: only counted (`coalesced`)."""
        leases = []
        for claim in claims:
            lease = self.work.lease(claim.lease_id)
            refusal = self.screen(claim, report, lease)
            if refusal is None and report.event_id in self.superseded:
                self.coalesced += 1
            elif refusal is None:
                assert lease is not None
                admitted = admit(report, lease, self.work.node(lease.node_id), self.work.now, self.work.rules)
                if admitted is not lease:
                    self.work.put(admitted)
                leases.append(admitted)
            else:
                self.reject(report, claim.agent_id, refusal, claim.lease_id, claim.fencing_token)
        return leases

    def reject(self, report: AgentReport, agent_id: str, refusal: Refusal, lease_id: str | None = None,
               token: int | None = None) -> None:
        rejected = RejectedReport(report.event_id, report.type, agent_id, lease_id, token, refusal)
        if refusal.reason not in COUNTED:
            self.rejected.append(rejected)
            return
        index = self._counted.setdefault((lease_id, refusal.reason), len(self.rejected))
        if index == len(self.rejected):
            self.rejected.append(rejected)
        else:
            self.rejected[index] = replace(rejected, count=self.rejected[index].count + 1)

    # -- reports --------------------------------------------------------------------------------

    def finished(self, report: TaskFinished) -> None:
        d, work = report.data, self.work
        outcome = RunOutcome(exit_code=d.exit_code, output_units=d.output_units, error=d.error,
                             finished_at=report.occurred_at)
        [claim] = claims_of(report)
        lease = work.lease(claim.lease_id)
        refusal = self.screen(claim, report, lease)
        if refusal is None:
            assert lease is not None
            work.end_lease(lease, Trigger.FINISHED, report, self.judged(lease, outcome))
            self.capacity_changed = True
        elif lease is not None and reconcilable(refusal, lease, work.task(lease.task_id), outcome):
            work.reconcile_late_success(lease, report, self.judged(lease, outcome))
            self.capacity_changed = True
        else:
            self.reject(report, claim.agent_id, refusal, claim.lease_id, claim.fencing_token)

    def judged(self, lease: LeaseRecord, outcome: RunOutcome) -> RunOutcome:
        """A clean finish as `plausibility.judge_success` records it (other outcomes as they are)."""
        if not succeeded(outcome.exit_code, outcome.error):
            return outcome
        work = self.work
        return judge_success(lease, work.task(lease.task_id), work.node(lease.node_id), outcome, work.now,
                             work.rules.reports)

    def progressed(self, report: TaskProgress) -> None:
        d, work = report.data, self.work
        for lease in self.accepted(report, claims_of(report)):
            work.mark_started(lease, report)
            lease = work.lease(lease.lease_id) or lease
            output = d.output_units
            refusal = refused_output(output, lease, work.task(lease.task_id), work.node(lease.node_id), work.now,
                                     work.rules.reports)
            if refusal is not None:  # the report is applied without its output claim
                self.reject(report, d.agent_id, refusal, d.lease_id, d.fencing_token)
                output = None
            work.put(replace(lease, progress=_latest(d.progress, lease.progress),
                             output_units=_latest(output, lease.output_units)))

    def checkpointed(self, report: CheckpointReport) -> None:
        d, work = report.data, self.work
        for lease in self.accepted(report, claims_of(report)):
            work.mark_started(lease, report)
            lease = replace(work.lease(lease.lease_id) or lease, last_checkpoint=d.checkpoint_uri,
                            last_checkpoint_at=work.now, progress=_latest(d.progress, lease.progress))
            work.put(lease)
            task = work.require_task(lease.task_id)
            if lease.run == task.run:
                work.put(replace(task, resume_from=d.checkpoint_uri))
            work.emit(TaskCheckpointed, task_subject(d.task_id), {
                "task_id": d.task_id, "lease_id": d.lease_id, "checkpoint_uri": d.checkpoint_uri,
                "checksum": d.checksum, "progress": d.progress, "output_units": lease.output_units,
            }, cause=report)

    def heartbeat(self, report: Heartbeat) -> None:
        d, work = report.data, self.work
        node = work.node(d.node_id)
        if node is None or node.agent_id != d.agent_id:
            detail = f"node {d.node_id} of agent {d.agent_id} is not registered (the agent must register first)"
            self.reject(report, d.agent_id, Refusal(Rejection.UNKNOWN_NODE, detail))
            return
        if not node.alive:
            self.announce_node(node, report)
        work.put(replace(node, last_seen=work.now, alive=True))
        for gpu in d.gpus:
            self.utilisation[(d.node_id, gpu.index)] = GpuReading(d.node_id, gpu.index, gpu.util_pct,
                                                                  gpu.memory_used_gb, work.now)
        claims = claims_of(report)
        leases = self.accepted(report, claims)
        for claim in claims:
            lease = work.lease(claim.lease_id)
            if lease is not None and _still_run_after_end(claim, lease):
                work.stop_zombie(lease)
        readings, heard_at = [(gpu.index, gpu.util_pct) for gpu in d.gpus], self.heard_at(report)
        for lease in leases:
            observed = observe(work.lease(lease.lease_id) or lease, lease_utilisation(lease, readings), work.now,
                               work.rules.idle, heard_at)
            work.put_quietly(observed)
        work.renew(leases, report, heard_at)
        for lease in leases:
            work.mark_started(lease, report)
        self.reclaim_idle(leases, report)

    def reclaim_idle(self, leases: list[LeaseRecord], cause: Heartbeat) -> None:
        """Revoke the leases whose GPUs stayed idle for the policy's window (`idle.due_for_reclaim`)."""
        work, rule = self.work, self.work.rules.idle
        for lease in leases:
            current = work.lease(lease.lease_id) or lease
            if due_for_reclaim(current, work.now, rule):
                work.revoke([current], RevokeReason.RECLAIMED_IDLE, reclaim_detail(current, work.now, rule), cause=cause)

    def registered(self, report: AgentRegistered) -> None:
        d, work = report.data, self.work
        node = NodeRecord(d.node_id, d.agent_id, d.card_type, len(d.gpus), d.mode, registered_at=work.now,
                          last_seen=work.now, alive=True, time_scale=d.time_scale)
        old = work.node(d.node_id)
        if old is None or _identity(old) != _identity(node):
            self.announce_node(node, report)
        if old is not None:  # a drain outlives the agent's restart
            node = replace(node, lease_expired_at=old.lease_expired_at, drained=old.drained, drain_reason=old.drain_reason)
        work.put(node)
        claims = {claim.lease_id: claim for claim in claims_of(report)}
        kept = []
        for lease in work.leases_on_node(d.node_id):
            claim = claims.get(lease.lease_id)
            if claim is not None and self.screen(claim, report, lease) is None:
                kept.append(lease)
            elif claim is None and d.started_at is not None and lease.granted_at >= d.started_at:
                continue  # granted after the agent process started: the grant may still be on its way
            else:
                work.end_lease(lease, Trigger.AGENT_RESTARTED, report)
                self.capacity_changed = True
        known = {lease.lease_id for lease in kept}
        self.accepted(report, [claim for lease_id, claim in claims.items() if lease_id not in known])
        work.renew(kept, report, self.heard_at(report))

    def heard_at(self, report: AgentReport) -> datetime:
        """When `report` showed its leases held: when it reached `cf:reports` (`arrived`), never later than
        now (Redis's clock and the dispatcher's may differ); now when its arrival is not known."""
        return min(self.work.now, self.arrived.get(report.event_id, self.work.now))

    def announce_node(self, node: NodeRecord, cause: AgentReport) -> None:
        """`node.registered`: a new or changed node, or a lost one that is back."""
        self.capacity_changed = True
        self.work.emit(NodeRegistered, node_subject(node.node_id), {
            "node_id": node.node_id, "agent_id": node.agent_id, "card_type": node.card_type, "gpus": node.gpus,
            "mode": node.mode,
        }, cause=cause)


def _identity(node: NodeRecord) -> tuple[object, ...]:
    return node.agent_id, node.card_type, node.gpus, node.mode, node.alive


def _still_run_after_end(claim: LeaseClaim, lease: LeaseRecord) -> bool:
    """The holding agent heartbeats a lease (right token) that has ended: a zombie run."""
    return not lease.active and lease.agent_id == claim.agent_id and lease.fencing_token == claim.fencing_token


def _latest(new: float | None, old: float | None) -> float | None:
    return old if new is None else new
