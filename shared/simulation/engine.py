"""The discrete-event engine: replay a workload on a fleet under one policy.

Events (arrival, data ready, finish, checkpoint, preemption, quota start/expiry, and the revisit a
plan asks for when a core task's preemption grace ends) wait in a heap
ordered by simulated time; nothing sleeps. All events of one instant are applied together, then —
if any of them could change a decision — the pure scheduling core is asked for a plan over an
immutable snapshot, and its grants and preemptions are applied. Tasks run for their TRUE duration
(scaled to the granted card); the core only ever sees estimates.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from shared.scheduling.model import Plan, PriorityClass, QueuedTask, QuotaAccount, RunningLease, Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.kept_snapshot import KeptSnapshot
from shared.scheduling.ordered_queue import OrderedQueue
from shared.scheduling.preemption import PREEMPT_CHECKPOINT_COST_S
from shared.simulation.cardmodel import CardModel, FlatCardModel
from shared.simulation.cluster import Cluster
from shared.simulation.fleet import Fleet
from shared.simulation.metrics import Recorder
from shared.simulation.state import EventKind, TaskRun
from shared.simulation.transitions import Transitions
from shared.simulation.workload import SimTask

PlanFn = Callable[[Snapshot, Sequence[QueuedTask], Policy, float], Plan]
ProgressFn = Callable[[int, float], None]

PROGRESS_EVERY = 256  # instants between progress reports
MAX_STEPS_PER_INSTANT = 10_000  # more decisions than this at one instant means the plan never settles


def default_plan_fn() -> PlanFn:
    """The production scheduling core (imported late so tests can run the engine without it)."""
    from shared.scheduling.plan import plan

    return plan


@dataclass(frozen=True, slots=True)
class Outcome:
    """Everything one run produced."""

    policy: str
    tasks: tuple[SimTask, ...]  # tasks that could be placed on this fleet
    unplaceable: tuple[str, ...]  # no adequate card type with enough GPUs in the fleet
    unfinished: int
    recorder: Recorder
    cut_off: tuple[str, ...] = ()  # stopped by their quota's expiry (not requeued)


class Simulation(Transitions):
    """One policy over one workload on one fleet. Build, then `run()` once."""

    def __init__(self, tasks: Sequence[SimTask], cluster: Cluster, policy: Policy, *,
                 plan_fn: PlanFn | None = None, card_model: CardModel | None = None,
                 quotas: Mapping[str, QuotaAccount] | None = None,
                 preempt_checkpoint_cost_s: float = PREEMPT_CHECKPOINT_COST_S) -> None:
        self.policy = policy
        self.preempt_checkpoint_cost_s = preempt_checkpoint_cost_s
        self.plan_fn = plan_fn or default_plan_fn()
        self.cards = card_model or FlatCardModel()
        self.fleet = Fleet(cluster)
        self.recorder = Recorder()
        self._heap: list[tuple[float, int, int, str]] = []
        self._seq = 0
        self._runs: dict[str, TaskRun] = {}
        self._queue: dict[str, QueuedTask] = {}
        # The queue kept sorted between plans (`OrderedQueue`), updated from the tasks touched since.
        self._kept = OrderedQueue.of((), policy)
        self._touched: dict[str, QueuedTask | None] = {}
        self._leases: dict[str, RunningLease] = {}
        self._lease_task: dict[str, str] = {}
        # The snapshot kept between plans (`KeptSnapshot`), updated from the nodes and leases touched since.
        self._kept_fleet = KeptSnapshot(self.fleet.nodes())
        self._leases_touched: dict[str, bool] = {}
        self._queued_by_class: Counter[PriorityClass] = Counter()
        self._ready_queued = 0  # queued tasks whose data is ready (the backlog a scheduler could serve)
        self._running_by_class: Counter[PriorityClass] = Counter()
        self._running_borrowing_standard = 0  # preemptible like opportunistic work (`Policy.checkpointing_standard_borrows`)
        self._quotas: dict[str, QuotaAccount] = dict(quotas or {})
        self._unplaceable = self._admit(tasks, cluster.gpus_by_card())
        self._completed = 0
        self._handlers: dict[EventKind, Callable[[str, float], bool]] = {
            EventKind.ARRIVAL: self._on_arrival,
            EventKind.READY: self._on_ready,
            EventKind.FINISH: self._on_finish,
            EventKind.CHECKPOINT: self._on_checkpoint,
            EventKind.PREEMPT: self._on_preempt,
            EventKind.QUOTA_EXPIRY: self._on_quota_expiry,
            EventKind.QUOTA_START: self._on_quota_start,
            EventKind.REVISIT: self._on_revisit,
        }
        self._revisits: set[float] = set()  # times a REVISIT event is already scheduled for

    # --- set-up -----------------------------------------------------------------------------
    def _admit(self, tasks: Sequence[SimTask], fleet_gpus: Mapping[str, int]) -> tuple[str, ...]:
        """Match every task to the fleet's card types; schedule arrivals and quota events."""
        unplaceable = []
        for task in tasks:
            options = self.cards.options(task, task.estimate_s, fleet_gpus)
            if not options:
                unplaceable.append(task.task_id)
                continue
            self._runs[task.task_id] = TaskRun(task, options, task.duration_s, task.estimate_s)
            self._push(task.submit_s, EventKind.ARRIVAL, task.task_id)
        for account in self._quotas.values():
            self._push(account.valid_from, EventKind.QUOTA_START, account.project)
            self._push(account.valid_to, EventKind.QUOTA_EXPIRY, account.project)
        return tuple(unplaceable)

    def _push(self, at: float, kind: EventKind, key: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, int(kind), self._seq, key))

    # --- main loop --------------------------------------------------------------------------
    def run(self, progress: ProgressFn | None = None) -> Outcome:
        """Replay until no event is left; return what happened."""
        steps_at_instant, previous, batches = 0, None, 0
        while self._heap:
            now = self._heap[0][0]
            steps_at_instant = steps_at_instant + 1 if now == previous else 0
            if steps_at_instant > MAX_STEPS_PER_INSTANT:
                raise RuntimeError(f"plan does not settle at t={now}: check preemption/grant logic")
            previous = now
            # 1. Apply every event of this instant.
            replan = self._apply_events_at(now)
            # 2. Decide with the pure core (unless nothing could have changed), apply the plan.
            if replan and self._something_to_decide():
                self._apply_plan(now, self._decide(now))
            # 3. Record the queue and report progress.
            self._sample(now)
            batches += 1
            if progress is not None and batches % PROGRESS_EVERY == 0:
                progress(self._completed, now)
        if progress is not None:
            progress(self._completed, previous or 0.0)
        return self._outcome()

    def _apply_events_at(self, now: float) -> bool:
        replan = False
        while self._heap and self._heap[0][0] == now:
            _, kind, _, key = heapq.heappop(self._heap)
            replan |= self._handle(EventKind(kind), key, now)
        return replan

    def _handle(self, kind: EventKind, key: str, now: float) -> bool:
        """Apply one event; True if it may change the next plan."""
        return self._handlers[kind](key, now)

    def _something_to_decide(self) -> bool:
        """False when the queue is empty, or the fleet is full and no waiting task could preempt."""
        if not self._queue:
            return False
        if self.fleet.busy_gpus < self.fleet.capacity:
            return True
        if self._running_by_class[PriorityClass.OPPORTUNISTIC] == 0:
            # Only core work may preempt a standard lease that borrows the headroom (or, with
            # `Policy.checkpointing_standard_yields`, any standard lease that checkpoints: asked of the plan).
            standard_victims = self._running_borrowing_standard > 0 or self.policy.checkpointing_standard_yields
            return self.policy.preemption and standard_victims and self._queued_by_class[PriorityClass.CORE] > 0
        queued = self._queued_by_class
        if self.policy.fill_reservations and queued[PriorityClass.CORE] + queued[PriorityClass.STANDARD] > 0:
            return True  # a reservation holder may reclaim GPUs from opportunistic fillers
        return self.policy.preemption and queued[PriorityClass.CORE] > 0

    def _decide(self, now: float) -> Plan:
        self.recorder.plans += 1
        return self.plan_fn(self._kept_snapshot(), self._kept_queue(), self.policy, now)

    def _kept_snapshot(self) -> KeptSnapshot:
        """The fleet as a `KeptSnapshot`: the kept one with the nodes and leases touched since the last plan
        as they are now (a lease that ended taken out, one that started or checkpointed put in as it is)."""
        touched = self._leases_touched
        removed = [lease_id for lease_id, kept in touched.items() if kept]
        added = [self._leases[lease_id] for lease_id in touched if lease_id in self._leases]
        self._kept_fleet = self._kept_fleet.changed(self.fleet.take_changed(), added, removed, quotas=self._quotas)
        touched.clear()
        return self._kept_fleet

    def _kept_queue(self) -> OrderedQueue:
        """The queue as an `OrderedQueue`: the kept one with the tasks touched since the last plan
        taken out as it held them and put back as they are now."""
        if self._touched:
            removed = [task for task in self._touched.values() if task is not None]
            added = [self._queue[task_id] for task_id in self._touched if task_id in self._queue]
            self._kept = self._kept.changed(added, removed)
            self._touched.clear()
        return self._kept

    def _apply_plan(self, now: float, plan: Plan) -> None:
        deferrals = plan.deferrals
        self.recorder.deferrals.update(zip(deferrals.task_ids, deferrals.reasons))
        for reservation in plan.reservations:
            self.recorder.reservations[reservation.task_id] = reservation.start_at
        for grant in plan.grants:
            self._start(grant, now)
        for preemption in plan.preemptions:
            self._push(now, EventKind.PREEMPT, preemption.lease_id)
        at = plan.revisit_at
        if at is not None and at > now and at not in self._revisits:
            self._revisits.add(at)
            self._push(at, EventKind.REVISIT, "")

    def _on_revisit(self, _key: str, now: float) -> bool:
        self._revisits.discard(now)
        return True  # plan again: a waiting core task may now preempt

    def _sample(self, now: float) -> None:
        queue, sample = self.recorder.queue, (len(self._queue), self._ready_queued)
        if not queue or queue[-1][1:] != sample:
            queue.append((now, *sample))

    def _outcome(self) -> Outcome:
        placed = tuple(run.task for run in self._runs.values())
        unfinished = sum(1 for run in self._runs.values() if run.task.task_id not in self.recorder.jcts)
        cut_off = tuple(task_id for task_id, run in self._runs.items() if run.cut_off)
        return Outcome(self.policy.name, placed, self._unplaceable, unfinished, self.recorder, cut_off)
