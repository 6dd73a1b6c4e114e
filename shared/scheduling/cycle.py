"""One scheduling cycle's private working state and the decision for one task.

`Cycle` owns the mutable views (free capacity, quota left, the reservation, preemptible leases) that
`plan()` needs while it walks the ordered queue; nothing here touches the snapshot or the queue it
was given. For each task: eligibility (data, match, approval), quota per card option, then each
card option in matcher order — headroom, the reservation (if the task would still run at its start),
best-fit placement. A task that fits nowhere is, in this order: the blocked head of a strict-order
baseline, a core task that preempts opportunistic work, the holder of the cycle's one reservation (which
preempts the opportunistic work filling its GPUs once it is due, or — with a preemption budget — any
opportunistic work whose loss its wait pays for), or simply deferred with the most
telling reason. Standard work counts GPUs held by opportunistic work as
headroom (`Borrowed`), so this cycle's opportunistic grants and preemptions update that count.

The parts of a cycle live in their own modules, each a mixin over this working state: the walk once the
reservation is settled (`cycle_settled_walk.py`), remembered failures of a shape (`cycle_repeats.py`), the
closing deferrals (`cycle_closing.py`), starting a task (`cycle_start.py`), preemption
(`cycle_preemption.py`) and the reservation (`cycle_reservation.py`). This module holds the state, the walk's
recipe (`walk`, `consider`) and what happens to a task that fits nowhere (`_handle_blocked`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from operator import attrgetter

from shared.scheduling import reasons
from shared.scheduling.backfill import Release, ReservationGuard
from shared.scheduling.cycle_closing import ClosedWalk
from shared.scheduling.cycle_preemption import CyclePreemption
from shared.scheduling.cycle_repeats import RepeatedFailures
from shared.scheduling.cycle_reservation import CycleReservation
from shared.scheduling.cycle_settled_walk import SettledWalk
from shared.scheduling.cycle_start import TaskStart
from shared.scheduling.eligibility import readiness_failure
from shared.scheduling.explain import Explainer, Miss, most_telling
from shared.scheduling.headroom import (
    Borrowed,
    core_demand,
    headroom_gpus,
    recent_core_demand,
    standard_borrow_window,
)
from shared.scheduling.kept_snapshot import KeptSnapshot
from shared.scheduling.model import (
    CardOption,
    Deferral,
    DeferralReason,
    Deferrals,
    Grant,
    Plan,
    Preemption,
    PriorityClass,
    QueuedTask,
    Reservation,
    RunningLease,
    Snapshot,
    enum_members,
)
from shared.scheduling.opportunistic_scan import OpportunisticScan, passes_readiness
from shared.scheduling.policy_knobs import HeadroomCoreDemand, Policy, PreemptAtOnce
from shared.scheduling.placement import Fleet
from shared.scheduling.preemption import VictimIndex, reclaimable_within_grace
from shared.scheduling.queue_columns import WalkColumns
from shared.scheduling.quota import QuotaBook
from shared.scheduling.restart_queue import QueueAhead
from shared.scheduling.yield_drain import DrainInputs

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
_CARD_TYPE, _NODE_ID = attrgetter("card_type"), attrgetter("node_id")
P = enum_members(PriorityClass)



class Cycle(SettledWalk, RepeatedFailures, ClosedWalk, TaskStart, CyclePreemption, CycleReservation):
    """Working state of one `plan()` call."""

    # Every attribute a slot (the mixins declare none): each of the plan's many attribute reads is a slot read, not
    # an instance-dict lookup (measured: the first plan over kept inputs −3.8% instructions). An attribute not named
    # here cannot be set.
    __slots__ = (
        "_any_width_after_s", "_at_once", "_behind_start", "_behind_texts", "_borrow_bits", "_borrow_s",
        "_by_submission", "_card_changes", "_drain_candidates", "_drain_priced", "_drain_state", "_fifo", "_fillers",
        "_fillers_at_once", "_gate", "_headroom_kept", "_kept_index", "_lease_scan", "_limited", "_opportunistic_scan",
        "_preempted", "_queue", "_queue_columns", "_ranked_ahead_discarded", "_ready_tasks", "_releases", "_repeats",
        "_reserved_options", "_restart_queue", "_settles_after_s", "_short_s", "_standard_victims", "_standard_yields",
        "_victim_leases", "_victims", "_victims_any_width", "_victims_at_once", "_victims_not_core", "blocked",
        "borrowed", "changes", "deferred_details", "deferred_ids", "deferred_reasons", "explain", "fleet", "grants",
        "guard", "guard_reclaims", "leases", "now", "policy", "preemptions", "quota", "reservation_settled",
        "reservations", "revisit_at",
    )

    def __init__(self, snapshot: Snapshot, policy: Policy, now: float, queue: Sequence[QueuedTask] = (),
                 columns: WalkColumns | None = None) -> None:
        self.policy = policy
        self.now = now
        queued_core = columns.core_gpus if columns is not None else None
        kept = snapshot if isinstance(snapshot, KeptSnapshot) else None  # its layout and lease index, kept between cycles
        self._kept_index = kept.index if kept is not None else None
        self.fleet = Fleet(snapshot.nodes, policy.max_heavy_per_node, _headroom_of(snapshot, queue, policy, now, queued_core),
                           *((kept.layout, kept.free_sorted, kept.fleet_start) if kept is not None else ()))
        self.quota = QuotaBook(snapshot.quotas, policy, now)
        self.leases = snapshot.leases
        # What the victim indexes and `Borrowed` read: they look at opportunistic leases only (`Borrowed` at every
        # lease where standard work borrows too). The reservation's sweep credits no standard lease (`_scan_leases`):
        # its start may come later than the borrowing allows, never earlier, so backfill still cannot delay it.
        # With `policy.checkpointing_standard_borrows` standard leases that borrow the headroom as fillers are counted
        # and may be victims too (a kept snapshot indexes them beside the opportunistic ones). With
        # `policy.checkpointing_standard_yields` every standard lease that checkpoints may be a victim too: they read
        # every lease.
        self._fillers = policy.checkpointing_standard_borrows and policy.preemption
        self._standard_yields = policy.checkpointing_standard_yields and policy.preemption
        self._standard_victims = self._fillers or self._standard_yields  # some standard leases may be victims
        # Yields of any width to core work that has waited this long (`policy.standard_yields_any_width_after_s`, with
        # `standard_yields_within_width`; None: off), and from when a core task's failure is a shape's (`_past_grace`):
        # once the victims it may take no longer grow with its wait.
        after = policy.standard_yields_any_width_after_s
        self._any_width_after_s = after if self._standard_yields and policy.standard_yields_within_width else None
        self._settles_after_s = max(policy.preempt_after_s, after or 0.0) if self._any_width_after_s is not None \
            else policy.preempt_after_s
        # Yields priced against the drain they lengthen (`_drain_paying`): over the queue too, with what it read last.
        self._drain_priced = self._standard_yields and policy.standard_yields_drain_priced
        self._queue = queue
        self._queue_columns = columns  # the kept queue's walk columns in the order of `queue` (None: a list)
        self._drain_state: DrainInputs | None = None  # `_drain_inputs`, made again after a grant or preemption
        self._ready_tasks: list[QueuedTask] | None = None  # `_ready_queue`
        self._drain_candidates: list[QueuedTask] | None = None  # `_drain_holder`: widest first
        self._restart_queue: QueueAhead | None = None  # `_queue_ahead`
        self._opportunistic_scan: OpportunisticScan | None = None  # `TaskStart._fills_headroom`
        # Under fifo a victim must rank behind the task that takes its GPUs (`ranks_ahead`); every other order ranks
        # by class first, and victims are always of a lower class.
        self._fifo = policy.order == "fifo"
        # The leases any victim index reads: the opportunistic ones and, with standard fillers on, the fillers (a
        # kept snapshot indexes both); every lease where standard leases that checkpoint may yield, or over a list.
        self._victim_leases = (kept.index.opportunistic_leases(self._fillers) if kept is not None and not self._standard_yields
                               else snapshot.leases)
        counts = partial(reclaimable_within_grace, policy=policy, now=now) if policy.headroom_counts_reclaimable_only else None
        window = standard_borrow_window(policy, now)  # standard work that borrows the headroom too
        self.borrowed = Borrowed(self._victim_leases if window is None else snapshot.leases, self.fleet.card_of_node,
                                 counts, window, self._fillers)
        # Standard work of at most this runtime borrows the headroom (`covers_headroom`; None: none does),
        # and of at most `_short_s` may use it (`_returns_within_grace`).
        grace = policy.preempt_after_s
        self._borrow_s = None if window is None else policy.standard_borrows_within_graces * grace
        self._short_s = grace if self._borrow_s is None else max(grace, self._borrow_s)
        # Whether a shape (`_shape`, `_walk_shape`) must tell runtimes within `_borrow_s` apart too.
        self._borrow_bits = self._borrow_s is not None and self._borrow_s != grace
        self.explain = Explainer(self.fleet, policy, now, self.borrowed)
        self.grants: list[Grant] = []
        # The deferrals so far, as the columns of `Deferrals` (no object per waiting task): `defer`.
        self.deferred_ids: list[str] = []
        self.deferred_reasons: list[DeferralReason] = []
        self.deferred_details: list[str] = []
        self.preemptions: list[Preemption] = []
        self.reservations: list[Reservation] = []
        self.guard: ReservationGuard | None = None
        self.guard_reclaims = False  # the holder can take GPUs back from fillers by its start
        self.reservation_settled = False  # the cycle's reservation was made (or could not be)
        self.blocked: Deferral | None = None  # strict order: the deferral every later task gets
        self.revisit_at: float | None = None  # when a waiting core task's preemption grace ends
        self._victims: VictimIndex | None = None
        # `_within_grace_victim_index`: (opportunistic ones that checkpoint, standard fillers) -> the index of those
        self._victims_at_once: dict[tuple[bool, bool], VictimIndex] = {}
        self._victims_not_core: VictimIndex | None = None  # `_victim_index_for` a task that is not core
        self._victims_any_width: VictimIndex | None = None  # ... a core task past `_any_width_after_s`
        self._fillers_at_once = self._fillers and policy.fillers_yield_at_once
        self._at_once = _preempt_at_once(policy)
        self._releases: list[tuple[str, Release]] = []  # GPUs this cycle's grants/holds give back
        self._preempted: set[str] = set()  # lease ids of this cycle's victims (no longer borrowing)
        self._headroom_kept: set[str] = set()  # card types where a standard holder reclaimed (`_reclaim_from_fillers`)
        self._gate = policy.readiness_gate
        self._limited = self.quota.projects  # projects with quota accounts (others are unlimited)
        self._repeats: dict[tuple, list] = {}  # shape -> how its last failure went (`_remember_failure`)
        self._card_changes: dict[str, int] = {}  # card type -> grants and preemptions on it (`_changes_on`)
        self.changes = 0  # grows with every grant and preemption (`_changed_on`)
        self._lease_scan: tuple | None = None  # `_lease_releases`: (card types, preempted count), its scan
        self._by_submission: tuple[list, list] | None = None  # `_leases_by_submission`
        self._ranked_ahead_discarded: dict[VictimIndex, int] = {}  # `_discard_ranked_ahead`: index -> leases done
        self._behind_start: str | None = None  # `_behind_reservation_start`
        self._reserved_options: dict[int, list[int]] = {}  # `_walk_shape`: shape -> its options on the guard's type
        self._behind_texts: dict[int, str] = {}  # `_behind_reservation`: whole minutes of runtime -> sentence

    @property
    def closed(self) -> bool:
        """Nothing more can start: strict order is blocked, or no GPU is free anywhere (and the
        highest-priority blocked task already has its reservation, or could not get one)."""
        if self.blocked is not None:
            return True
        return self.fleet.free_total == 0 and self.reservation_settled

    def walk(self, ordered: Sequence[QueuedTask], columns: WalkColumns | None = None) -> None:
        """Consider every task in queue order; once `closed`, defer the rest cheaply (`defer_rest`).
        The rest of the walk after the reservation is settled is `_walk_settled` with the kept queue's
        `columns` (in this order), else `_walk_settled_tasks`."""
        consider, fleet = self.consider, self.fleet
        for position, task in enumerate(ordered):
            if self.blocked is not None or (fleet.free_total == 0 and self.reservation_settled):  # self.closed
                self._defer_rest_from(ordered, position, columns)
                return
            if self.reservation_settled:
                if columns is not None:
                    self._walk_settled(ordered, position, columns)
                else:
                    self._walk_settled_tasks(ordered, position)
                return
            consider(task)

    def consider(self, task: QueuedTask) -> None:
        """Grant the task, or defer it with a reason (maybe reserving or preempting for it)."""
        # The readiness checks of `readiness_failure`, inlined: this runs for every queued task.
        if (self._gate and not task.data_ready) or not task.options or not task.approved:
            self.defer(task.task_id, *readiness_failure(task, self.policy))
            return
        if task.project in self._limited:
            options, failure = self.quota.usable_options(task)
            if failure is not None:
                self.defer(task.task_id, *failure)
                return
        else:
            options = task.options
        self._consider_usable(task, options)

    def _ready_queue(self) -> list[QueuedTask]:
        """The queue's tasks that pass the readiness checks (`consider`'s, `readiness_failure`'s: data under the gate,
        a match, approval: `passes_readiness`), in queue order: the waiting work the drain holder and the queue ahead
        of a restart are read from — made once per cycle (the queue does not change within it)."""
        if self._ready_tasks is None:
            gate = self._gate
            self._ready_tasks = [task for task in self._queue if passes_readiness(task, gate)]
        return self._ready_tasks

    def _consider_usable(self, task: QueuedTask, options: Sequence[CardOption]) -> None:
        """`consider` for a ready task, with the card options its quota allows (at least one)."""
        if self.reservation_settled and not self._may_start(task, options):
            # the cheap, common case
            self.defer(task.task_id, R.NO_CAPACITY, self.explain.no_capacity(task, options))
            return
        self._consider_room(task, options)

    def _consider_room(self, task: QueuedTask, options: Sequence[CardOption]) -> None:
        """`_consider_usable` once the task `_may_start` (or before the reservation is settled): attempt it,
        unless the reservation is settled and it would fail like the last task of its shape."""
        shape = None
        if self.reservation_settled and (task.priority_class != P.CORE or self._past_grace(task)):
            shape = self._shape(task, options)
            if self._repeat_failure(task, options, shape):
                return
        self._attempt(task, options, shape)

    def _attempt(self, task: QueuedTask, options: Sequence[CardOption], shape: tuple | None) -> None:
        """Try to start the task on these options, else handle it as blocked; remember how a shape's
        failure went (`_remember_failure`) if it changed nothing."""
        changes = self._changes()
        misses = self._try_start(task, options)
        if misses:
            miss = self._handle_blocked(task, options, misses)
            if shape is not None and self._changes() == changes and self.blocked is None:
                self._remember_failure(shape, options, miss)

    def _may_start(self, task: QueuedTask, options: Sequence[CardOption]) -> bool:
        """False only when no option can have room (not even by preemption): then a full attempt is
        pointless and, the reservation being settled, nothing else would happen to the task. Per card
        option: not more GPUs than are free, and below the smallest count that already found no node (as
        the task is, or as a light task: placement's failure caches)."""
        if self.fleet.may_have_room(task.gpus, task.heavy, map(_CARD_TYPE, options)):
            return True
        return self._may_preempt(task) and self._preemption_may_help(task)

    def defer(self, task_id: str, reason: DeferralReason, detail: str) -> None:
        """Record that the task waits, why and the sentence saying so (after the deferrals so far)."""
        self.deferred_ids.append(task_id)
        self.deferred_reasons.append(reason)
        self.deferred_details.append(detail)

    def _add(self, deferral: Deferral) -> None:
        self.defer(deferral.task_id, deferral.reason, deferral.detail)

    def to_plan(self) -> Plan:
        deferrals = Deferrals(tuple(self.deferred_ids), tuple(self.deferred_reasons), tuple(self.deferred_details))
        return Plan(
            grants=tuple(self.grants),
            preemptions=tuple(self.preemptions),
            reservations=tuple(self.reservations),
            deferrals=deferrals,
            revisit_at=self.revisit_at,
        )

    def _handle_blocked(self, task: QueuedTask, options: Sequence[CardOption], misses: list[Miss]) -> Miss:
        """Preempt, reserve, block or defer a task that fits nowhere; returns the most telling miss."""
        miss = most_telling(misses)
        if miss.pool is None or miss.reason == R.BEHIND_RESERVATION:
            self._add(self._deferral(task, miss, misses))
        elif (never := self.explain.never_fits(task, options)) is not None:
            self.defer(task.task_id, R.NO_CAPACITY, never)  # not a candidate: it neither blocks the line nor reserves
        elif self.policy.head_of_line_blocking:
            self._add(self._deferral(task, miss, misses))
            self.blocked = Deferral("", R.HEAD_OF_LINE, reasons.head_of_line(task.task_id))
        elif self._may_preempt(task) and self._preempt(task, options):
            pass
        elif not self.reservation_settled:
            self._reserve(task, options, self._deferral(task, miss, misses))
            self._mention_grace(task)
        else:
            self._add(self._deferral(task, miss, misses))
            self._mention_grace(task)
        return miss

    def _mention_grace(self, task: QueuedTask) -> None:
        """A core task waiting out its preemption grace is told when it may preempt (last deferral)."""
        if task.priority_class != P.CORE or not self.policy.preemption:
            return
        grace_left = self._grace_ends(task) - self.now
        if grace_left > 0 and self._victim_index().has_victims():
            self.deferred_details[-1] = reasons.preemption_grace(self.deferred_details[-1], grace_left)

    def _deferral(self, task: QueuedTask, miss: Miss, misses: list[Miss]) -> Deferral:
        wide = miss.reason == R.HEADROOM and self.wide(task, [item.option for item in misses])
        return self.explain.deferral(task, miss, misses, self.guard, wide)


def _headroom_of(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy, now: float,
                 queued_core: Mapping[str, int] | None = None):
    """headroom(card type, total GPUs) for this cycle: the policy's share, capped by the GPUs core work
    holds or waits for on the type when the policy tracks core demand (counted only if needed).
    `queue` is in the policy's order (as `plan()` walks it); `queued_core`: its core tasks' GPUs per card
    type, if a kept queue counted them (`WalkColumns.core_gpus`)."""
    if not policy.headroom_tracks_core or not policy.headroom:
        return partial(headroom_gpus, policy)
    if isinstance(snapshot, KeptSnapshot):  # the same map and the core leases (the only ones counted), kept
        card_of_node, leases = snapshot.layout.card_type_of, snapshot.index.core_leases()
    else:
        card_of_node, leases = dict(zip(map(_NODE_ID, snapshot.nodes), map(_CARD_TYPE, snapshot.nodes))), snapshot.leases
    demand = _core_demand_of(leases, queue, policy, card_of_node, now, queued_core)
    return lambda card_type, total: headroom_gpus(policy, card_type, total, demand.get(card_type, 0))


def _core_demand_of(leases: Sequence[RunningLease], queue: Sequence[QueuedTask], policy: Policy,
                    card_of_node: Mapping[str, str], now: float, queued_core: Mapping[str, int] | None) -> dict[str, int]:
    """The core demand that caps the headroom (`policy.headroom_core_demand`), from the running leases (only
    the core ones count) and the queue."""
    # `plan()` passes the ordered queue: every order but fifo puts the core class first.
    core_first = policy.order != "fifo"
    try:
        which = HeadroomCoreDemand(policy.headroom_core_demand)  # a plain string from a policy variant works too
    except ValueError:
        raise ValueError(f"unknown headroom_core_demand {policy.headroom_core_demand!r}; known: "
                         f"{', '.join(HeadroomCoreDemand)}") from None
    if which is HeadroomCoreDemand.PRESENT:
        return core_demand(leases, queue, card_of_node, core_first=core_first, queued_gpus=queued_core)
    return recent_core_demand(leases, queue, card_of_node, now - policy.preempt_after_s, core_first,
                              every_queued=which is HeadroomCoreDemand.QUEUED_OR_RECENT, queued_gpus=queued_core)


def _preempt_at_once(policy: Policy) -> PreemptAtOnce:
    """`policy.preempt_at_once` as the enum (a plain string from a policy variant works too)."""
    try:
        return PreemptAtOnce(policy.preempt_at_once)
    except ValueError:
        raise ValueError(f"unknown preempt_at_once {policy.preempt_at_once!r}; known: {', '.join(PreemptAtOnce)}") from None
