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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from operator import attrgetter, itemgetter

from shared.scheduling import reasons
from shared.scheduling.backfill import (
    Release,
    ReservationGuard,
    fills_reservation,
    find_reservation,
    yields_to_reservation,
)
from shared.scheduling.eligibility import readiness_failure, readiness_failures
from shared.scheduling.explain import Explainer, Miss, most_telling
from shared.scheduling.headroom import (
    Borrowed,
    blocked_by_headroom,
    core_demand,
    headroom_gpus,
    headroom_needed,
    recent_core_demand,
    standard_borrow_window,
    wider_than_headroom_allows,
)
from shared.scheduling.kept_snapshot import KeptSnapshot
from shared.scheduling.model import (
    CardOption,
    Deferral,
    DeferralReason,
    Deferrals,
    Grant,
    HeadroomCoreDemand,
    Plan,
    Policy,
    Preemption,
    PreemptAtOnce,
    PreemptionBudget,
    PriorityClass,
    QueuedTask,
    Reservation,
    RunningLease,
    Snapshot,
    enum_members,
    new_grant,
)
from shared.scheduling.ordered_queue import (
    CHECKPOINTS,
    CORE,
    FLAG_VALUES,
    OPPORTUNISTIC,
    WalkColumns,
    longest_of,
    runtimes_of,
)
from shared.scheduling.placement import Allocation, Fleet, Pool
from shared.scheduling.preemption import (
    VictimChoice,
    VictimIndex,
    budget_gpu_hours,
    ends_within_grace,
    grant_reclaimable_within_grace,
    not_reclaimable_at_once,
    reclaimable_within_grace,
)
from shared.scheduling.quota import SECONDS_PER_HOUR, QuotaBook

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
_CARD_TYPE, _NODE_ID, _FIRST = attrgetter("card_type"), attrgetter("node_id"), itemgetter(0)
_RUNTIME = attrgetter("runtime_s")
_KIND = CORE | OPPORTUNISTIC | CHECKPOINTS  # the flags that tell a task's class and whether it checkpoints
P = enum_members(PriorityClass)


class Cycle:
    """Working state of one `plan()` call."""

    def __init__(self, snapshot: Snapshot, policy: Policy, now: float, queue: Sequence[QueuedTask] = (),
                 columns: WalkColumns | None = None) -> None:
        self.policy = policy
        self.now = now
        queued_core = columns.core_gpus if columns is not None else None
        kept = snapshot if isinstance(snapshot, KeptSnapshot) else None  # its layout and lease index, kept between cycles
        self._kept_index = kept.index if kept is not None else None
        self.fleet = Fleet(snapshot.nodes, policy.max_heavy_per_node, _headroom_of(snapshot, queue, policy, now, queued_core),
                           kept.layout if kept is not None else None)
        self.quota = QuotaBook(snapshot.quotas, policy, now)
        self.leases = snapshot.leases
        # What the victim indexes and `Borrowed` read: they look at opportunistic leases only (`Borrowed` at every
        # lease where standard work borrows too). The reservation's sweep credits no standard lease (`_scan_leases`):
        # its start may come later than the borrowing allows, never earlier, so backfill still cannot delay it.
        # With `policy.checkpointing_standard_borrows` they read every lease: standard leases that borrow the
        # headroom as fillers are counted and may be victims too (a kept snapshot indexes opportunistic ones only).
        # With `policy.checkpointing_standard_yields` every standard lease that checkpoints may be a victim too.
        self._fillers = policy.checkpointing_standard_borrows and policy.preemption
        self._standard_yields = policy.checkpointing_standard_yields and policy.preemption
        self._standard_victims = self._fillers or self._standard_yields  # some standard leases may be victims
        # Under fifo a victim must rank behind the task that takes its GPUs (`_ranks_ahead`); every other order ranks
        # by class first, and victims are always of a lower class.
        self._fifo = policy.order == "fifo"
        self._opportunistic = (kept.index.opportunistic_leases() if kept is not None and not self._standard_victims
                               else snapshot.leases)
        counts = partial(reclaimable_within_grace, policy=policy, now=now) if policy.headroom_counts_reclaimable_only else None
        window = standard_borrow_window(policy, now)  # standard work that borrows the headroom too
        self.borrowed = Borrowed(self._opportunistic if window is None else snapshot.leases, self.fleet.card_of_node,
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
        self._victims_at_once: VictimIndex | None = None  # `_at_once_victim_index`
        self._victims_not_core: VictimIndex | None = None  # `_victim_index_for` a task that is not core
        self._victims_fillers: VictimIndex | None = None  # `_filler_victim_index`
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
        self._behind_start: str | None = None  # `_behind_reservation_start`
        self._reserved_options: dict[int, list[int]] = {}  # `_walk_shape`: shape -> its options on the guard's type
        self._behind_texts: dict[int, str] = {}  # `_behind_reservation`: whole minutes of runtime -> sentence

    # -- the walk ------------------------------------------------------------------------------

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

    def _walk_settled_tasks(self, ordered: Sequence[QueuedTask], start: int) -> None:
        """`_walk_settled` for a queue without columns (a list: a cold plan, the simulator's first cycle): the
        same shortcuts, keyed by a task's (GPUs, heavy, card types) read from the task instead of the kept
        queue's shape number: the quota is asked by the task's longest runtime against the shape's kept bound
        (`QuotaBook.allows_longest`; `usable_indexes` when that fails) — unless a refusal kept for the project and
        shape since its last charge (`QuotaBook.refusals`) refuses it from its runtimes —, and a ready task whose quota allows all
        its options and whose shape already found no room since the last grant or preemption on one of its card
        types is deferred with that shape's NO_CAPACITY sentence (a core task unless it may preempt); a shape's
        room check is kept while `Fleet.version` stands. Exact for the same reasons; the rest goes through
        `_consider_usable` (the quota allows some options) or `_consider_room` (room, or preemption may help), as
        `consider` would."""
        fleet, limited, quota, explain, policy = self.fleet, self._limited, self.quota, self.explain, self.policy
        gate, core, no_capacity = policy.readiness_gate, P.CORE, R.NO_CAPACITY
        longest_bounds, refusals, no_bounds, margin = quota.longest_bounds, quota.refusals, {}, policy.quota_expiry_margin_s
        no_room: dict[tuple, list] = {}  # shape -> [`_changes()` when checked, the sentence, `_changes_on` then]
        rooms: dict[tuple, tuple[int, bool]] = {}  # shape -> (`fleet.version` then, `fleet.may_have_room`)
        helps: dict[tuple, tuple[int, bool]] = {}  # shape -> (victim index version then, `_preemption_may_help`)
        add_id, add_reason, add_detail = (self.deferred_ids.append, self.deferred_reasons.append,
                                          self.deferred_details.append)
        for position in range(start, len(ordered)):  # not closed at `start` (`walk` checked)
            task = ordered[position]
            options = task.options
            if (gate and not task.data_ready) or not options or not task.approved:
                failure = readiness_failure(task, policy)
                add_id(task.task_id)
                add_reason(failure[0])
                add_detail(failure[1])
                continue
            shape = (task.gpus, task.heavy, tuple(map(_CARD_TYPE, options)))
            if task.project in limited:  # the quota as `_walk_settled` asks it, the shape as its key
                project = task.project
                refused = refusals.get(project)  # what refused earlier tasks since the project's last charge
                if refused is not None and (refusal := refused.get(shape)) is not None and (
                        failure := refusal.of(map(_RUNTIME, options))) is not None:
                    add_id(task.task_id)
                    add_reason(failure[0])
                    add_detail(failure[1])
                    continue
                runtimes = runtimes_of(task)
                longest_s = longest_of(runtimes)
                bound = longest_bounds.get(project, no_bounds).get(shape)
                if bound is None:  # not yet asked since the project's last charge
                    allowed = quota.allows_longest(project, shape, shape[2], shape[0], longest_s)
                else:  # `allows_longest` with its kept bound, inlined
                    allowed = not (bound[0] < longest_s + margin or bound[1] < shape[0] * longest_s / SECONDS_PER_HOUR)
                if not allowed:
                    usable, failure = quota.usable_indexes(project, shape[2], shape[0], runtimes, shape)
                    if failure is not None:
                        add_id(task.task_id)
                        add_reason(failure[0])
                        add_detail(failure[1])
                        continue
                    if len(usable) < len(options):  # some of its options
                        self._consider_usable(task, tuple([options[index] for index in usable]))
                        if self.closed:
                            self._defer_rest_from(ordered, position + 1, None)
                            return
                        continue
            changes = self.changes
            known = no_room.get(shape)
            if known is not None and (known[0] == changes or self._still_no_room(known, shape[2], changes)):
                if not (task.priority_class == core and self._may_preempt_since(task.submitted_at)
                        and self._shape_may_preempt(shape, shape, helps)):
                    add_id(task.task_id)
                    add_reason(no_capacity)
                    add_detail(known[1])
                    continue
            else:
                room = rooms.get(shape)
                if room is None or room[0] != fleet.version:
                    room = rooms[shape] = (fleet.version, fleet.may_have_room(*shape))
                if not (room[1] or (task.priority_class == core and self._may_preempt_since(task.submitted_at)
                                    and self._shape_may_preempt(shape, shape, helps))):  # `_may_start`
                    text = explain.no_capacity(task, options)
                    add_id(task.task_id)
                    add_reason(no_capacity)
                    add_detail(text)
                    no_room[shape] = [changes, text, self._changes_on_types(shape[2])]
                    continue
            self._consider_room(task, options)  # `_may_start` holds
            if self.closed:
                self._defer_rest_from(ordered, position + 1, None)
                return

    def _walk_settled(self, ordered: Sequence[QueuedTask], start: int, columns: WalkColumns) -> None:
        """The walk from `start` on, the reservation settled, as `walk` does it — but the readiness failure
        of a task is read from its flags (`columns.flags`), and a task whose shape (GPUs, heavy, card types:
        `columns.shapes`) already found no room since the last grant or preemption on one of its card types,
        and whose quota allows all its card options, is deferred with that shape's NO_CAPACITY sentence (a
        core task unless it may preempt). Exact: it is `_consider_usable`'s cheap case — a shape's room check
        (`_may_start` without preemption), once failed, fails for the rest of the cycle (free capacity only
        shrinks and the failure caches only tighten), and it and its sentence read only the pools of the
        shape's card types, which only grants and preemptions there change (`_changes_on`). Other tasks
        go through `_consider_with_room` (their failures remembered by `_walk_shape`). A task is read only
        when the columns cannot decide it: its quota may not allow all its options (`QuotaBook.allows_longest`
        from its longest runtime; a refusal kept for its project and shape, `QuotaBook.refusals`, answers first), its shape may have room, or it is a core task whose preemption may help.
        Only those calls can close the cycle (`closed`), so it is checked after them, not before each task."""
        fleet, limited, quota, explain = self.fleet, self._limited, self.quota, self.explain
        flags, projects, shapes, task_ids = columns.flags, columns.projects, columns.shapes, columns.task_ids
        submitted, longest, shape_table, runtimes = columns.submitted, columns.longest, columns.shape_table, columns.runtimes
        failures = readiness_failures(self.policy)  # by flags
        longest_bounds, refusals, no_bounds, margin = quota.longest_bounds, quota.refusals, {}, self.policy.quota_expiry_margin_s
        no_room: dict[int, list] = {}  # shape -> [`_changes()` when checked, the sentence, `_changes_on` then]
        rooms: dict[int, tuple[int, bool]] = {}  # shape -> (`fleet.version` then, `fleet.may_have_room`)
        helps: dict[int, tuple[int, bool]] = {}  # shape -> (victim index version then, `_preemption_may_help`)
        add_id, add_reason, add_detail = (self.deferred_ids.append, self.deferred_reasons.append,
                                          self.deferred_details.append)
        no_capacity = R.NO_CAPACITY
        for position in range(start, len(ordered)):  # not closed at `start` (`walk` checked)
            task_flags, shape = flags[position], shapes[position]
            failure = failures[task_flags]
            if failure is None and projects[position] in limited:
                refused = refusals.get(projects[position])  # what refused earlier tasks since the project's last charge
                if refused is not None and (refusal := refused.get(shape)) is not None and (
                        failure := refusal.of(runtimes[position])) is not None:
                    add_id(task_ids[position])
                    add_reason(failure[0])
                    add_detail(failure[1])
                    continue
                gpus, _, card_types = shape_table[shape]
                longest_s, bound = longest[position], longest_bounds.get(projects[position], no_bounds).get(shape)
                if bound is None:  # not yet asked since the project's last charge
                    allowed = quota.allows_longest(projects[position], shape, card_types, gpus, longest_s)
                else:  # `allows_longest` with its kept bound, inlined: this runs for every task with a quota
                    allowed = not (bound[0] < longest_s + margin or bound[1] < gpus * longest_s / SECONDS_PER_HOUR)
                if not allowed:
                    usable, failure = quota.usable_indexes(projects[position], card_types, gpus, runtimes[position], shape)
                    if failure is None and len(usable) < len(card_types):  # some of its options
                        task = ordered[position]
                        self._consider_usable(task, tuple([task.options[index] for index in usable]))
                        if self.closed:
                            self._defer_rest_from(ordered, position + 1, columns)
                            return
                        continue
            if failure is not None:
                add_id(task_ids[position])
                add_reason(failure[0])
                add_detail(failure[1])
                continue
            changes = self.changes
            known = no_room.get(shape)
            if known is not None and (known[0] == changes or self._still_no_room(known, shape_table[shape][2], changes)):
                if (task_flags & CORE and self._may_preempt_since(submitted[position])
                        and self._shape_may_preempt(shape, shape_table[shape], helps)):
                    self._consider_with_room(ordered, position, columns)  # `_may_start` holds: preemption may help
                    if self.closed:
                        self._defer_rest_from(ordered, position + 1, columns)
                        return
                else:
                    add_id(task_ids[position])
                    add_reason(no_capacity)
                    add_detail(known[1])
                continue
            room = rooms.get(shape)
            if room is None or room[0] != fleet.version:
                room = rooms[shape] = (fleet.version, fleet.may_have_room(*shape_table[shape]))
            if room[1] or (task_flags & CORE and self._may_preempt_since(submitted[position])
                           and self._shape_may_preempt(shape, shape_table[shape], helps)):  # `_may_start`
                self._consider_with_room(ordered, position, columns)
                if self.closed:
                    self._defer_rest_from(ordered, position + 1, columns)
                    return
            else:
                task = ordered[position]
                text = explain.no_capacity(task, task.options)
                self.defer(task.task_id, no_capacity, text)
                no_room[shape] = [changes, text, self._changes_on(task.options)]

    def _still_no_room(self, known: list, card_types: Sequence[str], changes: int) -> bool:
        """True if a shape's room check failed (`_walk_settled`'s [`_changes()` then, the sentence, `_changes_on`
        its options then]) and no grant or preemption touched its card types since: it fails alike and its
        sentence holds (it reads only those card types' pools). Marks it checked at `changes`."""
        if known[2] != self._changes_on_types(card_types):
            return False
        known[0] = changes
        return True

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

    def _consider_with_room(self, ordered: Sequence[QueuedTask], position: int, columns: WalkColumns) -> None:
        """`_consider_usable(task, task.options)` in the settled walk (`_walk_settled`) for the task at this
        position, whose quota allows all its card options and which `_may_start` (not asked again). Its shape
        is `_walk_shape`, made from the columns (the kept queue's shape number instead of its card types), and
        a repeated failure is said from them too (`_repeat_walk_failure`): the task is read only to attempt it."""
        task_flags, shape_number, runtimes = columns.flags[position], columns.shapes[position], columns.runtimes[position]
        card_types, shape = columns.shape_table[shape_number][2], None
        if not task_flags & CORE or self._past_grace_since(columns.submitted[position]):
            shape = self._walk_shape(task_flags, shape_number, card_types, runtimes, columns.grace_bits[position])
            if self._repeat_walk_failure(shape, card_types, runtimes, columns.task_ids[position]):
                return
        task = ordered[position]
        self._attempt(task, task.options, shape)

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

    # -- repeated failures ---------------------------------------------------------------------
    # Once the reservation is settled, a task that is not core (or is past its preemption grace:
    # `_past_grace`) and fails to start fails exactly like
    # the last task of the same shape did, as long as nothing changed since on the card types of its
    # usable options (no grant, no preemption there: `_changes_on`): the failure depends only on the
    # shape — class, GPUs, heavy, whether it checkpoints, and per usable card option its type, whether it
    # returns within the preemption grace and whether it would still run at the reservation's start — and
    # on the state of those card types: each one's pool (free GPUs, heavy counts, failure caches), the GPUs
    # opportunistic work holds there (`Borrowed`), and the reservation's guard, which only grants and
    # preemptions on its own card type charge; the sentences read the same (`Explainer`). Such a task
    # gets the remembered deferral without a placement attempt; only a "behind the reservation" sentence
    # names the task's own runtime, so it is said again with it. The failure caches of placement change
    # on a failed attempt, but they only remember what would fail anyway.

    def _changes(self) -> int:
        """Grows with every grant and preemption (`_changed_on`)."""
        return self.changes

    def _past_grace(self, task: QueuedTask) -> bool:
        """True for a core task that may preempt now if anything (or preemption is off): its failure is a
        shape's like any other — its preemption attempt reads the victims of its card types, which only a
        preemption there takes (and marks: `_changed_on`); a failed attempt only teaches the victim index
        what would fail anyway. Unlike `_may_preempt`, asks for no revisit."""
        return not self.policy.preemption or self.now >= self._grace_ends(task)

    def _past_grace_since(self, submitted_at: float) -> bool:
        """`_past_grace` of a core task submitted at `submitted_at`."""
        return not self.policy.preemption or self.now >= submitted_at + self.policy.preempt_after_s
    def _changes_on(self, options: Sequence[CardOption]) -> int:
        """Grows with every grant and preemption on one of these options' card types (a sum of counters
        that only grow: the same sum means none of them moved) — what a remembered failure depends on."""
        changed = self._card_changes
        return sum([changed.get(option.card_type, 0) for option in options])

    def _changes_on_types(self, card_types: Sequence[str]) -> int:
        """`_changes_on` options of these card types."""
        changed = self._card_changes
        return sum([changed.get(card_type, 0) for card_type in card_types])

    def _changed_on(self, card_type: str) -> None:
        """A grant or preemption touched the card type (each calls this for every card type it touches)."""
        self._card_changes[card_type] = self._card_changes.get(card_type, 0) + 1
        self.changes += 1

    def _shape(self, task: QueuedTask, options: Sequence[CardOption]) -> tuple:
        grace, now, guard = self.policy.preempt_after_s, self.now, self.guard
        if guard is None:
            cards = tuple([(option.card_type, option.runtime_s <= grace) for option in options])
        else:
            reserved, start = guard.card_type, guard.start_at
            cards = tuple([(option.card_type, option.runtime_s <= grace,
                            option.card_type == reserved and now + option.runtime_s > start) for option in options])
        if self._borrow_bits:  # whether each option borrows the headroom (`covers_headroom`)
            cards = (cards, tuple([option.runtime_s <= self._borrow_s for option in options]))
        return (task.priority_class, task.gpus, task.heavy, task.checkpoint_interval_s is not None, cards)

    def _walk_shape(self, task_flags: int, shape_number: int, card_types: Sequence[str], runtimes: Sequence[float],
                    bits: int) -> tuple:
        """`_shape(task, task.options)` from a kept queue's columns: the class and whether the task checkpoints
        (its flags), the shape number (GPUs, heavy, card types) in place of those, and the per-option flags
        as the bits of one number — its `grace_bits`, then whether it would still run at the reservation's
        start on each option of the reserved card type, then (`_borrow_bits`) whether each option borrows the
        headroom: as telling, cheaper to make. (Such keys are never equal to `_shape`'s, which have another
        length.)"""
        if bits < 0:  # more options than the column holds
            bits = 1
            for runtime_s in runtimes:
                bits = bits + bits + (runtime_s <= self.policy.preempt_after_s)
        guard = self.guard
        if guard is not None:
            reserved = self._reserved_options.get(shape_number)
            if reserved is None:  # the guard is set once per cycle: its card type's options per shape hold
                reserved = self._reserved_options[shape_number] = [
                    index for index, card_type in enumerate(card_types) if card_type == guard.card_type]
            now, start = self.now, guard.start_at
            for index in reserved:
                bits = bits + bits + (now + runtimes[index] > start)
        if self._borrow_bits:  # whether each option borrows the headroom (`covers_headroom`)
            for runtime_s in runtimes:
                bits = bits + bits + (runtime_s <= self._borrow_s)
        return (task_flags & _KIND, shape_number, bits)

    def _repeat_failure(self, task: QueuedTask, options: Sequence[CardOption], shape: tuple) -> bool:
        """Defer the task as the last one of its shape if nothing changed since (True if so)."""
        known = self._repeats.get(shape)
        if known is None:
            return False
        changes = self.changes
        if known[4] != changes:  # a change somewhere since: was it on one of the shape's card types?
            if known[0] != self._changes_on(options):
                return False
            known[4] = changes
        _, reason, detail, index, _ = known
        if detail is None:
            detail = self._behind_reservation(options[index].runtime_s)
        self.defer(task.task_id, reason, detail)
        return True

    def _repeat_walk_failure(self, shape: tuple, card_types: Sequence[str], runtimes: Sequence[float],
                             task_id: str) -> bool:
        """`_repeat_failure` of a task in the settled walk, from its columns: its card types (in option order)
        and its runtimes on them."""
        known = self._repeats.get(shape)
        if known is None:
            return False
        changes = self.changes
        if known[4] != changes:  # a change somewhere since: was it on one of the shape's card types?
            if known[0] != self._changes_on_types(card_types):
                return False
            known[4] = changes
        _, reason, detail, index, _ = known
        if detail is None:
            detail = self._behind_reservation(runtimes[index])
        self.deferred_ids.append(task_id)  # `defer`, inlined: this runs for most tasks with room
        self.deferred_reasons.append(reason)
        self.deferred_details.append(detail)
        return True

    def _behind_reservation(self, runtime_s: float) -> str:
        """The "behind the reservation" sentence of a task running `runtime_s` on the option it names, kept per
        whole minute of runtime (`reasons.format_duration` says no more than whole minutes from a minute on)."""
        if not runtime_s >= 60.0:
            return self._behind_reservation_start() + reasons.format_duration(runtime_s)
        minutes = int(runtime_s // 60)
        text = self._behind_texts.get(minutes)
        if text is None:
            text = self._behind_texts[minutes] = self._behind_reservation_start() + reasons.format_duration(runtime_s)
        return text

    def _behind_reservation_start(self) -> str:
        """`reasons.behind_reservation_start` for the cycle's reservation (made once: the guard is set once)."""
        if self._behind_start is None:
            guard = self.guard
            assert guard is not None
            self._behind_start = reasons.behind_reservation_start(guard.holder, guard.card_type, guard.start_at - self.now)
        return self._behind_start

    def _remember_failure(self, shape: tuple, options: Sequence[CardOption], miss: Miss) -> None:
        """Remember how the shape's attempt went: [`_changes_on` its options, the reason, the sentence (None:
        "behind the reservation", said with each task's runtime on the option at the index that follows),
        `_changes()` when the first value was last found unchanged]."""
        last_reason, last_detail = self.deferred_reasons[-1], self.deferred_details[-1]
        stamp, changes = self._changes_on(options), self._changes()
        if last_reason == R.BEHIND_RESERVATION:
            if miss.reason != R.BEHIND_RESERVATION:
                return
            self._repeats[shape] = [stamp, last_reason, None, options.index(miss.option), changes]
        else:
            self._repeats[shape] = [stamp, last_reason, last_detail, 0, changes]

    def defer_rest(self, tasks: Sequence[QueuedTask]) -> None:
        """Once closed: defer every remaining task cheaply (core tasks may still preempt)."""
        add_id, add_reason, add_detail = (self.deferred_ids.append, self.deferred_reasons.append,
                                          self.deferred_details.append)
        may_preempt = self.blocked is None and self.policy.preemption
        core, gate, policy = P.CORE, self.policy.readiness_gate, self.policy
        blocked = self.blocked or Deferral("", R.NO_CAPACITY, reasons.NO_FREE_GPUS_TEXT)
        reason, detail = blocked.reason, blocked.detail
        for task in tasks:
            # The readiness checks of `readiness_failure`, inlined: this loop may see 100,000 tasks.
            if (gate and not task.data_ready) or not task.options or not task.approved:
                failure = readiness_failure(task, policy)
                add_id(task.task_id)
                add_reason(failure[0])
                add_detail(failure[1])
                continue
            if may_preempt and task.priority_class == core:
                may_preempt = self._defer_closed_core(task, reason, detail)
                continue
            add_id(task.task_id)
            add_reason(reason)
            add_detail(detail)

    def _defer_closed_core(self, task: QueuedTask, reason: DeferralReason, detail: str) -> bool:
        """`defer_rest` for a ready core task while preemption may still help one: it preempts if it may
        and that helps (`consider`), else gets the closing reason and sentence. Returns whether preemption
        may still help a later one (False once no victim is left)."""
        may_preempt = True
        if self._may_preempt(task):
            may_preempt = self._victim_index().has_victims()
            if may_preempt and self._preemption_may_help(task):
                self.consider(task)
                return may_preempt
        self.defer(task.task_id, reason, detail)
        return may_preempt

    def _defer_rest_from(self, ordered: Sequence[QueuedTask], start: int, columns: WalkColumns | None) -> None:
        """`defer_rest(ordered[start:])`; with the kept queue's columns, the same deferrals without reading
        the tasks that get only a readiness failure or the closing reason: runs of them are copied from the
        columns (`_defer_run`), and each ready core task goes through `_defer_closed_core` in its place while
        preemption may still help one."""
        if columns is None:
            self.defer_rest(ordered[start:])
            return
        closing = self.blocked or Deferral("", R.NO_CAPACITY, reasons.NO_FREE_GPUS_TEXT)
        reason, detail = closing.reason, closing.detail
        failures = readiness_failures(self.policy)
        by_flags = ([reason if failure is None else failure[0] for failure in failures],
                    [detail if failure is None else failure[1] for failure in failures])
        may_preempt, end = self.blocked is None and self.policy.preemption, len(ordered)
        ready_core = bytes([bool(flags & CORE) and failures[flags] is None for flags in FLAG_VALUES]).ljust(256, b"\0")
        marks = bytes(columns.flags[start:]).translate(ready_core) if may_preempt else b""
        position = start
        while position < end:
            core_at = marks.find(1, position - start) if may_preempt else -1
            stop = end if core_at < 0 else start + core_at
            self._defer_run(columns, position, stop, by_flags)
            if stop == end:
                return
            may_preempt = self._defer_closed_core(ordered[stop], reason, detail)
            position = stop + 1

    def _defer_run(self, columns: WalkColumns, start: int, stop: int,
                   by_flags: tuple[list[DeferralReason], list[str]]) -> None:
        """Defer the tasks at positions start..stop-1 with the reason and sentence of their flags."""
        flags = columns.flags[start:stop]
        self.deferred_ids.extend(columns.task_ids[start:stop])
        self.deferred_reasons.extend(map(by_flags[0].__getitem__, flags))
        self.deferred_details.extend(map(by_flags[1].__getitem__, flags))

    def _may_preempt(self, task: QueuedTask) -> bool:
        """True for core work (preemption on) that has waited `policy.preempt_after_s` since its
        submission. A core task still inside that grace may not preempt yet: GPUs often come free by
        themselves, and every preemption costs a checkpoint write and a restart. The plan then asks to
        be revisited when the earliest grace ends (`Plan.revisit_at`). With `policy.preempt_at_once` it
        may (`"checkpointing"`), but only victims that checkpoint on preemption (`_victim_index_for`); with
        `policy.fillers_yield_at_once`, only the standard leases that borrow the headroom."""
        return task.priority_class == P.CORE and self._may_preempt_since(task.submitted_at)

    def _may_preempt_since(self, submitted_at: float) -> bool:
        """`_may_preempt` of a core task submitted at `submitted_at`."""
        if not self.policy.preemption:
            return False
        grace_ends = submitted_at + self.policy.preempt_after_s  # `_grace_ends`
        if self.now >= grace_ends:
            return True
        self._revisit(grace_ends)
        # only victims that checkpoint (`_victim_index_for`): any, or the standard fillers
        return self._at_once is PreemptAtOnce.CHECKPOINTING or self._fillers_at_once

    def _revisit(self, at: float) -> None:
        """Ask to be planned again at `at` (the earliest such moment wins)."""
        if self.revisit_at is None or at < self.revisit_at:
            self.revisit_at = at

    def _grace_ends(self, task: QueuedTask) -> float:
        return task.submitted_at + self.policy.preempt_after_s

    def _shape_may_preempt(self, shape: int, described: tuple[int, bool, tuple[str, ...]],
                           helps: dict[int, tuple[int, bool]]) -> bool:
        """`_preemption_may_help` a task of this shape number and (GPUs, heavy, card types) — all it reads of
        the task — remembered per shape while the victim index answers alike (`VictimIndex.version`)."""
        version = self._victim_index().version
        known = helps.get(shape)
        if known is not None and known[0] == version:
            return known[1]
        helps[shape] = (version, answer := self._preemption_may_help_shape(*described))
        return answer

    def _preemption_may_help(self, task: QueuedTask) -> bool:
        return self._preemption_may_help_shape(task.gpus, task.heavy, [option.card_type for option in task.options])

    def _preemption_may_help_shape(self, gpus: int, heavy: bool, card_types: Sequence[str]) -> bool:
        pools = self.fleet.pools
        index = self._victim_index()
        return any(index.may_help(pools[card_type], gpus, heavy) for card_type in card_types if card_type in pools)

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

    # -- starting ------------------------------------------------------------------------------

    def _try_start(self, task: QueuedTask, options: Sequence[CardOption]) -> list[Miss]:
        """Grant the task on its first card option that takes it; else why each option did not."""
        misses = []
        fills = self.guard_reclaims and fills_reservation(task, self.policy)  # may ignore the guard
        wide = self.wide(task, options)
        for option in options:
            pool = self.fleet.pools.get(option.card_type)
            if pool is None:
                misses.append(Miss(R.NO_CAPACITY, option, None))
                continue
            filler = False  # standard work that checkpoints, granted on headroom GPUs (`_fills_headroom`)
            if self._eats_headroom(task, pool, wide) and not self._may_use_headroom(option):
                if not self._fills_headroom(task):
                    misses.append(Miss(R.HEADROOM, option, pool))
                    continue
                filler = True
            guard = self.guard
            if guard is not None and (fills or not guard.applies(option.card_type, self.now + option.runtime_s)):
                guard = None
            borrowing = filler or self.covers_headroom(task, option)
            allocation = self._place(task, pool, guard, borrowing)
            if allocation is not None:
                self._grant(task, option, allocation, guard, borrowing, filler)
                return []
            misses.append(Miss(self._why_not(task, pool, guard), option, pool))
        return misses

    def _eats_headroom(self, task: QueuedTask, pool: Pool, wide: bool) -> bool:
        """True if the task (standard) would leave less than it must (`headroom_needed`) free or borrowed."""
        needed = headroom_needed(task.gpus, pool.headroom, pool.total_gpus, wide)
        if not blocked_by_headroom(task.priority_class, task.gpus, pool.free_total, needed):
            return False  # the free GPUs alone cover it: no need to count the borrowed ones
        borrowed = self.borrowed.of(pool.card_type)
        return blocked_by_headroom(task.priority_class, task.gpus, pool.free_total, needed, borrowed)

    def _fills_headroom(self, task: QueuedTask) -> bool:
        """True if the task may take headroom GPUs as a filler (`policy.checkpointing_standard_borrows`): it
        checkpoints, so core work past its grace takes the GPUs back at the cost of its checkpoint write."""
        return self._fillers and task.priority_class == P.STANDARD and task.checkpoint_interval_s is not None

    def _may_use_headroom(self, option: CardOption) -> bool:
        """True if a standard task may take headroom GPUs on this option: it returns them within the grace
        (`_returns_within_grace`) and no standard holder counts on that headroom this cycle (`_headroom_kept`)."""
        return self._returns_within_grace(option) and option.card_type not in self._headroom_kept

    def _returns_within_grace(self, option: CardOption) -> bool:
        """True if a task would give the GPUs back (by its estimate) before a core task arriving now
        could preempt (`policy.preempt_after_s`; with `policy.standard_borrows_within_graces`, that many
        graces if more): then it may use headroom GPUs — a core task waits about no longer for them than
        it would wait to preempt, and they do not idle meanwhile."""
        return self.policy.preemption and option.runtime_s <= self._short_s

    def wide(self, task: QueuedTask, options: Sequence[CardOption]) -> bool:
        """True for a standard task that would hold the cycle's reservation (none is settled yet) and
        asks for more than total − headroom on every card type it accepts: it need leave only the
        rest of the type free (no task that fits the fleet is kept out for good by the headroom)."""
        if task.priority_class != P.STANDARD or self.reservation_settled:
            return False
        pools = self.fleet.pools
        return wider_than_headroom_allows(task.gpus, ((pool.total_gpus, pool.headroom) for option in options
                                                      if (pool := pools.get(option.card_type)) is not None))

    def covers_headroom(self, task: QueuedTask, option: CardOption) -> bool:
        """True if the GPUs of a grant to the task on this option would count as headroom (`Borrowed`):
        opportunistic work — with `policy.headroom_counts_reclaimable_only`, only work core work
        could have back within the preemption grace — and, with `policy.standard_borrows_within_graces`,
        standard work whose estimate ends within that many graces."""
        if task.priority_class != P.OPPORTUNISTIC:
            return task.priority_class == P.STANDARD and self._borrow_s is not None and option.runtime_s <= self._borrow_s
        return self.borrowed.counts is None or grant_reclaimable_within_grace(task, option.runtime_s, self.policy)

    def _place(self, task: QueuedTask, pool: Pool, guard: ReservationGuard | None,
               covers_headroom: bool) -> Allocation | None:
        if guard is None:
            return self.fleet.place(pool, task.gpus, task.heavy)
        key = (pool.card_type, task.heavy, task.gpus > pool.max_node_gpus)
        if task.gpus > guard.room(covers_headroom) or task.gpus >= guard.failed_at.get(key, task.gpus + 1):
            return None
        allocation = self.fleet.place(pool, task.gpus, task.heavy, guard.limit(task.heavy))
        if allocation is None:
            guard.failed_at[key] = task.gpus
        return allocation

    def _why_not(self, task: QueuedTask, pool: Pool, guard: ReservationGuard | None) -> DeferralReason:
        if guard is not None and self.fleet.place(pool, task.gpus, task.heavy) is not None:
            return R.BEHIND_RESERVATION
        if task.heavy and self.fleet.place(pool, task.gpus, False) is not None:
            return R.HEAVY_SPREAD
        return R.NO_CAPACITY

    def _grant(self, task: QueuedTask, option: CardOption, allocation: Allocation,
               guard: ReservationGuard | None, borrowing: bool, filler: bool = False) -> None:
        """Start the task: `borrowing`, its GPUs count as headroom (`covers_headroom`, or `filler`: standard
        work on headroom GPUs, whose lease keeps the flag)."""
        placements = self.fleet.take(allocation, task.heavy)
        if guard is not None:
            guard.charge(allocation, borrowing)
        self.quota.charge(task, option)
        end = self.now + option.runtime_s
        self.grants.append(new_grant(task.task_id, option.card_type, placements, end, filler))
        self._changed_on(option.card_type)
        if borrowing:
            self.borrowed.change(option.card_type, task.gpus)
        for rank, count in allocation:
            self._releases.append((option.card_type, Release(end, rank, count, task.heavy, borrowing)))

    # -- when it does not fit ------------------------------------------------------------------

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

    def _preempt(self, task: QueuedTask, options: Sequence[CardOption], budget: float | None = None) -> bool:
        """Preempt the cheapest victims that let the task start on one of its card options. Under the
        cycle's reservation (the task would still run at its start), only where the guard lets the
        task use the freed GPUs: otherwise they would idle and the victims' work be wasted. With a
        `budget` (GPU-hours): any opportunistic lease not yet taken may be a victim, whatever the loss
        cap, as long as the victims lose no more than the budget in total (`_preempt_within_budget`)."""
        index = self._victim_index_for(task) if budget is None else self._budget_victim_index(budget)
        if self._fifo:
            index.discard((lease.lease_id for lease in self._opportunistic if _ranks_ahead(lease, task)), self.fleet)
        for option in options:
            pool = self.fleet.pools.get(option.card_type)
            if pool is None:
                continue
            end = self.now + option.runtime_s
            guard = self.guard if self.guard is not None and self.guard.applies(option.card_type, end) else None
            if guard is not None and task.gpus > guard.room(False):  # core work borrows nothing
                continue
            choice = index.choose(self.fleet, pool, task.gpus, task.heavy, guard.limit(task.heavy) if guard else None)
            if choice is None or (budget is not None and choice.lost_gpu_hours > budget + 1e-12):
                continue
            if guard is not None:
                guard.charge([(rank, task.gpus) for rank, _ in choice.holds], False)
            held = 0
            for rank, count in choice.holds:
                self.fleet.hold(rank, count)
                self._releases.append((option.card_type, Release(end, rank, count, task.heavy)))
                held += count
            index.commit(choice, self.fleet)
            for other in (self._victims, self._victims_at_once, self._victims_not_core, self._victims_fillers):
                if other is not index and other is not None:
                    other.discard([victim.lease.lease_id for victim in choice.victims], self.fleet)
            self._release_victims(choice, task, end, task.gpus - held)
            for victim in choice.victims:
                lease = victim.lease
                self._preempted.add(lease.lease_id)
                if self._borrows(lease):
                    self.borrowed.change(victim.card_type, -lease.gpus)
                self.preemptions.append(Preemption(lease.lease_id, lease.task_id, task.task_id, victim.lost_gpu_hours))
            node_ids = sorted({self.fleet.node_ids[victim.rank] for victim in choice.victims})
            for card_type in {option.card_type, *(victim.card_type for victim in choice.victims)}:
                self._changed_on(card_type)
            detail = reasons.awaiting_preemption(len(choice.victims), task.gpus, option.card_type, node_ids)
            self.defer(task.task_id, R.AWAITING_PREEMPTION, detail)
            return True
        return False

    def _release_victims(self, choice: VictimChoice, task: QueuedTask, end: float, taken: int) -> None:
        """For later reservations this cycle: the victims' GPUs come free now, except the `taken` ones
        the preempting task will run on until `end` (victims in order, as the choice counted them)."""
        for victim in choice.victims:
            gpus = victim.lease.gpus
            used = min(gpus, max(0, taken))
            taken -= used
            if used:
                self._releases.append((victim.card_type, Release(end, victim.rank, used, task.heavy)))
            if gpus > used:
                self._releases.append((victim.card_type, Release(self.now, victim.rank, gpus - used, False)))

    def _reserve(self, task: QueuedTask, options: Sequence[CardOption], fallback: Deferral) -> None:
        cards = {option.card_type for option in options}
        yield_at = self._fillers_yield_at(task)
        wide = self.wide(task, options)
        guard = find_reservation(task, options, self.fleet, self._releases_for(cards, yield_at, task), self.now, wide)
        self.reservation_settled = True  # one sweep per cycle, successful or not
        fillers_yield_then = False  # the reservation starts when the holder's grace ends
        if guard is not None and yield_at is not None:
            if self._reclaim_from_fillers(task, options, cards, guard):
                return
        if guard is not None and self._preempt_within_budget(task, options, guard):
            return
        if guard is not None and yield_at is not None:
            fillers_yield_then = guard.start_at == yield_at > self.now
            if fillers_yield_then:
                self._revisit(yield_at)
        if guard is None:
            self._add(fallback)
            if not self.policy.backfill:
                self.blocked = Deferral("", R.HEAD_OF_LINE, reasons.head_of_line(task.task_id))
            return
        # Fillers may ignore the guard only if the holder can take their GPUs back by its start.
        self.guard, self.guard_reclaims = guard, yield_at is not None and yield_at <= guard.start_at
        node_ids = tuple(sorted(self.fleet.node_ids[rank] for rank, _ in guard.allocation))
        self.reservations.append(Reservation(task.task_id, guard.card_type, guard.start_at, node_ids))
        detail = reasons.reserved(task.gpus, guard.card_type, guard.start_at - self.now, node_ids, fillers_yield_then)
        self.defer(task.task_id, R.RESERVED, detail)
        if not self.policy.backfill:
            detail = reasons.behind_blocked_head(task.task_id, self.policy.name)
            self.blocked = Deferral("", R.BEHIND_RESERVATION, detail)

    def _preempt_within_budget(self, task: QueuedTask, options: Sequence[CardOption], guard: ReservationGuard) -> bool:
        """Preemption that pays (`policy.preemption_budget_share`): the reservation's holder, a core task
        past its grace, would otherwise wait until the guard's start; it preempts now if the cheapest
        victims lose in total no more than the budget that wait sets (`budget_gpu_hours`, over the holder's
        GPUs or — basis "drain" — the reservation's GPUs free now, which its drain holds). True if it did."""
        policy = self.policy
        share = policy.preemption_budget_share
        if share <= 0 or guard.start_at <= self.now or not self._may_preempt(task):
            return False
        gpus = task.gpus
        if PreemptionBudget(policy.preemption_budget_basis) is PreemptionBudget.DRAIN:
            gpus = guard.free_now(self.fleet)
        budget = budget_gpu_hours(share, gpus, guard.start_at - self.now)
        return budget > 0 and self._preempt(task, options, budget)

    def _fillers_yield_at(self, task: QueuedTask) -> float | None:
        """When opportunistic work filling the reservation yields its GPUs to this task, should it
        hold the reservation: once the task's preemption grace is over (with `policy.preempt_at_once`: now).
        None: never (policy off, or the task is opportunistic itself)."""
        if not self.policy.fill_reservations or task.priority_class == P.OPPORTUNISTIC:
            return None
        if self._at_once is not PreemptAtOnce.NEVER:  # fillers checkpoint: they lose only their write, now or later
            return self.now
        return max(self.now, self._grace_ends(task))

    def _reclaim_from_fillers(self, task: QueuedTask, options: Sequence[CardOption], cards: set[str],
                              guard: ReservationGuard) -> bool:
        """The reservation is due now, but only because fillers yield: preempt them (True if done) — with
        `policy.holder_reclaims_within_headroom`, not if the headroom would refuse the holder anyway; with
        `policy.reclaiming_holder_keeps_headroom`, a standard holder's card types keep their headroom for it for
        the rest of the cycle (`_may_use_headroom`)."""
        if guard.start_at > self.now:
            return False
        if self.policy.holder_reclaims_within_headroom and self._headroom_refuses(task, guard):
            return False
        plain = find_reservation(task, options, self.fleet, self._releases_for(cards, None), self.now, guard.wide)
        if plain is not None and plain.start_at <= self.now:
            return False  # due anyway: leases past their estimated end count as ending now
        if not self._preempt(task, options):
            return False
        if self.policy.reclaiming_holder_keeps_headroom and task.priority_class == P.STANDARD:
            self._headroom_kept.update(option.card_type for option in options)
        return True

    def _headroom_refuses(self, task: QueuedTask, guard: ReservationGuard) -> bool:
        """True if the headroom keeps the standard holder off the guard's card type whatever fillers yield:
        free + borrowed GPUs minus its own stay below what it must leave (`headroom_needed`) — preempting a
        borrowing filler moves its GPUs from borrowed to free and leaves that sum as it is."""
        if task.priority_class != P.STANDARD:
            return False
        pool = self.fleet.pools[guard.card_type]
        needed = headroom_needed(task.gpus, pool.headroom, pool.total_gpus, guard.wide)
        return pool.free_total + self.borrowed.of(guard.card_type) - task.gpus < needed

    def _releases_for(self, card_types: set[str], yield_at: float | None,
                      holder: QueuedTask | None = None) -> dict[str, list[Release]]:
        """Per card type, when the running leases and this cycle's grants and holds free their GPUs."""
        grouped = self._lease_releases(card_types, yield_at, holder)
        for card_type, release in self._releases:
            if card_type in card_types:
                grouped.setdefault(card_type, []).append(release)
        return grouped

    # -- lazily built indexes ------------------------------------------------------------------

    def _borrows(self, lease: RunningLease) -> bool:
        """True if the running lease's GPUs count as headroom (`Borrowed`)."""
        counts = self.borrowed.counts
        borrowing = lease.priority_class == P.OPPORTUNISTIC or (
            self._fillers and lease.borrowed_headroom and lease.priority_class == P.STANDARD)
        return borrowing and (counts is None or counts(lease))

    def _victim_index(self) -> VictimIndex:
        if self._victims is None:
            spared = partial(ends_within_grace, policy=self.policy, now=self.now) if self.policy.preemption_spares_ending else None
            leases = self._opportunistic if not self._preempted else [  # `_at_once_victim_index` preempted first
                lease for lease in self._opportunistic if lease.lease_id not in self._preempted]
            self._victims = VictimIndex(leases, self.fleet, self.now, self.policy.preempt_max_lost_gpu_hours, spared,
                                        borrowing_standard=self._fillers, checkpointing_standard=self._standard_yields)
        return self._victims

    def _victim_index_for(self, task: QueuedTask) -> VictimIndex:
        """The victims the task may take now: any (`_victim_index`) once its grace is over; inside it (with
        `policy.preempt_at_once`: a reservation's holder reclaiming its fillers, or — `"checkpointing"` — a core
        task) only those that checkpoint on preemption (`_at_once_victim_index`)."""
        if self._at_once is not PreemptAtOnce.NEVER and self.now < self._grace_ends(task):
            return self._at_once_victim_index()
        if self._standard_victims and task.priority_class != P.CORE:  # a reservation's holder reclaiming its fillers
            return self._not_core_victim_index()
        if self._fillers_at_once and self.now < self._grace_ends(task):
            return self._filler_victim_index()
        return self._victim_index()

    def _filler_victim_index(self) -> VictimIndex:
        """Only the standard leases that borrow the headroom, for a core task inside its grace
        (`policy.fillers_yield_at_once`), without those preempted already this cycle."""
        if self._victims_fillers is None:
            leases = [lease for lease in self._opportunistic if lease.borrowed_headroom
                      and lease.priority_class == P.STANDARD and lease.lease_id not in self._preempted]
            self._victims_fillers = VictimIndex(leases, self.fleet, self.now, self.policy.preempt_max_lost_gpu_hours,
                                                borrowing_standard=True)
        return self._victims_fillers

    def _not_core_victim_index(self) -> VictimIndex:
        """`_victim_index` without standard leases (only core work may take those: fillers, and with
        `policy.checkpointing_standard_yields` those that checkpoint), and without those preempted already this
        cycle."""
        if self._victims_not_core is None:
            spared = partial(ends_within_grace, policy=self.policy, now=self.now) if self.policy.preemption_spares_ending else None
            leases = [lease for lease in self._opportunistic if lease.lease_id not in self._preempted]
            self._victims_not_core = VictimIndex(leases, self.fleet, self.now, self.policy.preempt_max_lost_gpu_hours, spared)
        return self._victims_not_core

    def _at_once_victim_index(self) -> VictimIndex:
        """`_victim_index` without the leases that do not checkpoint on preemption (`not_reclaimable_at_once`),
        and without those preempted already this cycle."""
        if self._victims_at_once is None:
            spared = partial(ends_within_grace, policy=self.policy, now=self.now) if self.policy.preemption_spares_ending else None
            leases = [lease for lease in self._opportunistic if lease.lease_id not in self._preempted]
            self._victims_at_once = VictimIndex(leases, self.fleet, self.now, self.policy.preempt_max_lost_gpu_hours,
                                                partial(not_reclaimable_at_once, spared=spared))
        return self._victims_at_once

    def _budget_victim_index(self, budget: float) -> VictimIndex:
        """Every opportunistic lease not preempted yet this cycle whose loss alone stays within `budget`."""
        spared = partial(ends_within_grace, policy=self.policy, now=self.now) if self.policy.preemption_spares_ending else None
        leases = [lease for lease in self._opportunistic if lease.lease_id not in self._preempted]
        return VictimIndex(leases, self.fleet, self.now, budget, spared)

    def _lease_releases(self, card_types: set[str], yield_at: float | None = None,
                        holder: QueuedTask | None = None) -> dict[str, list[Release]]:
        """Per card type, when the running leases on nodes of these card types are expected to free their GPUs
        (and whether they borrow headroom until then: opportunistic leases) — a new list per card type. Leases
        preempted this cycle are left out (`_release_victims` accounts for their GPUs). With `yield_at`, leases
        that yield to the reservation free their GPUs by then at the latest (under fifo only those ranking behind
        the `holder`: it could not preempt the others, `_ranks_ahead`). One scan serves every `yield_at`
        for the same card types while no lease is preempted (`_reserve` asks with and without it); over a kept
        snapshot the scan reads only its opportunistic leases (`_scan_kept_leases`)."""
        key = (frozenset(card_types), len(self._preempted))  # the preempted set only grows
        if self._lease_scan is None or self._lease_scan[0] != key:
            scan = self._scan_leases if self._kept_index is None else self._scan_kept_leases
            self._lease_scan = (key, *scan(key[0]))
        _, releases, yielding = self._lease_scan
        grouped = {card_type: list(found) for card_type, found in releases.items()}
        if yield_at is not None:
            for card_type, index, estimated_end, lease in yielding:
                if yield_at < estimated_end and not (self._fifo and holder is not None and _ranks_ahead(lease, holder)):
                    found = grouped[card_type]
                    found[index] = found[index]._replace(at=yield_at)
        return grouped

    def _scan_leases(self, card_types: frozenset[str]) -> tuple[dict[str, list[Release]], list[tuple[str, int, float, RunningLease]]]:
        """`_lease_releases` without `yield_at`, and (card type, position, estimated end, lease) of the leases among
        them that yield to the reservation (`yields_to_reservation`)."""
        rank_of, card_of = self.fleet.rank_of, self.fleet.card_of
        opportunistic, preempted = P.OPPORTUNISTIC, self._preempted
        policy, now, counts, new_release = self.policy, self.now, self.borrowed.counts, tuple.__new__
        releases: dict[str, list[Release]] = {}
        yielding = []
        for lease in self.leases:
            rank = rank_of.get(lease.node_id)
            # `not preempted` first: usually nothing is, and asking the set would read every lease id's string
            if rank is not None and (card_type := card_of[rank]) in card_types and (not preempted or lease.lease_id not in preempted):
                found = releases.get(card_type)
                if found is None:
                    found = releases[card_type] = []
                borrows = False
                if lease.priority_class == opportunistic:  # `_borrows`, inlined
                    borrows = counts is None or counts(lease)
                    if yields_to_reservation(lease, policy, now):
                        yielding.append((card_type, len(found), lease.estimated_end, lease))
                # `Release(...)` without its Python-level __new__
                found.append(new_release(Release, (lease.estimated_end, rank, len(lease.gpu_indices), lease.heavy, borrows)))
        return releases, yielding

    def _scan_kept_leases(self, card_types: frozenset[str]) -> tuple[dict[str, list[Release]], list[tuple[str, int, float, RunningLease]]]:
        """`_scan_leases` over a kept snapshot's lease index: the releases of the leases that are not opportunistic
        are kept as they are (sorted); only the opportunistic ones — whose borrowing and yielding depend on the
        policy and on `now` — are read (the same releases, in another order: the sweep sorts them)."""
        index, preempted = self._kept_index, self._preempted
        policy, now, counts, new_release = self.policy, self.now, self.borrowed.counts, tuple.__new__
        releases: dict[str, list[Release]] = {}
        yielding = []
        for card_type in card_types:
            found = list(map(_FIRST, index.releases.get(card_type, ())))
            for rank, lease in index.opportunistic.get(card_type, {}).values():
                if preempted and lease.lease_id in preempted:
                    continue
                borrows = counts is None or counts(lease)
                if yields_to_reservation(lease, policy, now):
                    yielding.append((card_type, len(found), lease.estimated_end, lease))
                found.append(new_release(Release, (lease.estimated_end, rank, len(lease.gpu_indices), lease.heavy, borrows)))
            if found:
                releases[card_type] = found
        return releases, yielding


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


def _ranks_ahead(lease: RunningLease, task: QueuedTask) -> bool:
    """Under fifo: True if the lease's task was submitted before `task` (ties: by id). Preempted for `task`, it would
    be back in the queue ahead of it and the next plan would give it the GPUs it gave up, again and again (a plan that
    never settles); so it is no victim of `task`. A lease whose submission is unknown ranks behind every task."""
    submitted_at = lease.submitted_at
    return submitted_at is not None and (submitted_at, lease.task_id) < (task.submitted_at, task.task_id)


def _preempt_at_once(policy: Policy) -> PreemptAtOnce:
    """`policy.preempt_at_once` as the enum (a plain string from a policy variant works too)."""
    try:
        return PreemptAtOnce(policy.preempt_at_once)
    except ValueError:
        raise ValueError(f"unknown preempt_at_once {policy.preempt_at_once!r}; known: {', '.join(PreemptAtOnce)}") from None
