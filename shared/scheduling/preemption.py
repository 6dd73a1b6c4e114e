"""Preemption: a core task that cannot start may take GPUs back from opportunistic leases.

Only opportunistic leases are victims (and, with `policy.checkpointing_standard_borrows`, for core work past
its grace, standard leases that borrow the headroom — after every opportunistic one; with
`policy.checkpointing_standard_yields`, after those, any standard lease that checkpoints — with
`policy.standard_yields_within_width` only one whose task is no wider than the core task: `Victim.width`; with
`policy.standard_yields_priced` only one whose restart costs less than the core task's wait: yield_price.py; with
`policy.standard_yields_drain_priced` the choice is priced against the drain it lengthens too: yield_drain.py), only on a card type
the core task accepts, and only when preempting them actually makes the task fit. Victims are chosen to lose the fewest GPU-hours of
progress since their last checkpoint (then the most recently started first): on one node, or across
nodes for a task that must span. The free GPUs the task will also need on those nodes are held back
for the rest of the cycle, and the core task itself waits (AWAITING_PREEMPTION) until the victims have
checkpointed and released their GPUs — GPUs are never granted and preempted in the same plan.

Reclaiming at once (`policy.preempt_at_once`, off in every preset): a reservation's holder inside its grace,
whose fillers then yield at once — and with "checkpointing" a core task inside its grace — may take the
victims that checkpoint on preemption (`not_reclaimable_at_once` leaves the others out); with
`policy.fillers_yield_at_once` a core task inside its grace takes standard fillers too, from the same index
(`CyclePreemption._within_grace_victim_index`: the union of what each setting allows).

Preemption that pays (`policy.preemption_budget_share`, off in every preset): the reservation's core
holder past its grace may instead take victims that lose more than their own cap, as long as all of them together lose
no more than a budget set by its wait until the reservation's start (`budget_gpu_hours`); cycle.py
builds a second index for it, capped by the budget, and `discard`s its victims from the first.

Finding the cheapest node is a lazy-greedy search: per (card type, GPU count, heavy) a heap of nodes by
their cost. Costs only grow during a cycle (free GPUs shrink, victims get used up), so a popped node
whose recomputed cost still equals its stored cost is the cheapest — no scan of the fleet per task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from heapq import heapify, heappop, heappush

from shared.scheduling.model import PriorityClass, QueuedTask, RunningLease
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.placement import Fleet, Pool
from shared.scheduling.quota import SECONDS_PER_HOUR
from shared.scheduling.yield_price import HoleTimes, task_widths, yield_pays

_STANDARD = PriorityClass.STANDARD

# A victim that checkpoints writes a checkpoint on the PreemptCommand and loses only the write.
PREEMPT_CHECKPOINT_COST_S = 60.0


@dataclass(frozen=True, slots=True)
class Victim:
    lease: RunningLease
    rank: int
    card_type: str  # of the node the lease runs on
    lost_gpu_hours: float  # progress since its last checkpoint that preemption throws away
    # 0: opportunistic; FILLER: a standard lease that borrows the headroom, taken after every opportunistic one;
    # YIELDING: a standard lease that checkpoints (`policy.checkpointing_standard_yields`), taken after fillers.
    standard: int = 0
    # With `policy.standard_yields_within_width`, a YIELDING victim's task GPUs over all its leases: only a core task of
    # at least as many GPUs takes it. Its checkpoint write is not what yielding costs: requeued, the task must find
    # all its GPUs free at once again. No wider than the core task, it fits wherever that task could start; wider — a
    # whole node for a 1-GPU task, two nodes for an 8-GPU one — its restart needs a larger hole than the core task
    # takes, so its reservation drains GPUs that idle while ready work waits. With `policy.standard_yields_priced`
    # the width prices its restart instead (yield_price.py). 0: any core task takes it.
    width: int = 0

    @property
    def order(self) -> tuple[int, float, float, str]:
        """Cheapest first: opportunistic, then standard fillers, then other standard leases; least lost progress,
        then most recently started, then lease id."""
        return (self.standard, self.lost_gpu_hours, -self.lease.started_at, self.lease.lease_id)


@dataclass(frozen=True, slots=True)
class VictimChoice:
    victims: tuple[Victim, ...]
    holds: tuple[tuple[int, int], ...]  # (rank, free GPUs to hold back for the preempting task)

    @property
    def lost_gpu_hours(self) -> float:
        """What preempting every victim throws away in total."""
        return sum(victim.lost_gpu_hours for victim in self.victims)


def checkpoint_write_gpu_hours(gpus: int) -> float:
    """What preempting a task of `gpus` GPUs that checkpoints on preemption costs at most: the write."""
    return gpus * PREEMPT_CHECKPOINT_COST_S / SECONDS_PER_HOUR


def loss_cap_gpu_hours(gpus: int, max_lost_gpu_hours: float | None) -> float:
    """The most a preemption may throw away for a lease of `gpus` GPUs: the policy's cap, or — None —
    the lease's own checkpoint write (a preemption then costs what the write costs anyway: only
    leases that checkpoint on preemption, or started less than the write's time ago, are victims)."""
    return checkpoint_write_gpu_hours(gpus) if max_lost_gpu_hours is None else max_lost_gpu_hours


def not_reclaimable_at_once(lease: RunningLease, spared: Callable[[RunningLease], bool] | None = None) -> bool:
    """True if a task inside its preemption grace may not take the lease even with
    `policy.preempt_at_once`: it does not checkpoint on preemption (or the policy spares it). A lease that
    checkpoints loses only its write (`lost_gpu_hours`), whether it is preempted now or a grace later; one
    that does not loses all its progress, and a restart from nothing — the grace is kept for those."""
    return not lease.checkpoints_on_preempt or (spared is not None and spared(lease))


def may_be_victim(lease: RunningLease, now: float, max_lost_gpu_hours: float | None) -> bool:
    """True if preempting the lease throws away no more than the cap (`loss_cap_gpu_hours`)."""
    return lost_gpu_hours(lease, now) <= loss_cap_gpu_hours(lease.gpus, max_lost_gpu_hours) + 1e-12


def lost_gpu_hours(lease: RunningLease, now: float) -> float:
    """GPU-hours preemption throws away: the checkpoint write for a lease that checkpoints on
    preemption (at most its progress since the last checkpoint), otherwise all its progress since
    its last checkpoint (or its start, if none)."""
    since = lease.last_checkpoint_at if lease.last_checkpoint_at is not None else lease.started_at
    return _lost_gpu_hours(lease.gpus, max(0.0, now - since), lease.checkpoints_on_preempt)


def _lost_gpu_hours(gpus: int, at_risk_s: float, checkpoints: bool) -> float:
    if checkpoints:
        at_risk_s = min(at_risk_s, PREEMPT_CHECKPOINT_COST_S)
    return gpus * at_risk_s / SECONDS_PER_HOUR


def reclaimable_within_grace(lease: RunningLease, policy: Policy, now: float) -> bool:
    """True if core work arriving now could have the lease's GPUs once its preemption grace is over:
    the lease ends by then (its estimate), or preempting it then loses no more than the cap."""
    by = now + policy.preempt_after_s
    if lease.estimated_end <= by:
        return True
    return policy.preemption and may_be_victim(lease, by, policy.preempt_max_lost_gpu_hours)


def grant_reclaimable_within_grace(task: QueuedTask, runtime_s: float, policy: Policy) -> bool:
    """`reclaimable_within_grace` for the lease a grant of this cycle would start (no checkpoint yet)."""
    if runtime_s <= policy.preempt_after_s:
        return True
    lost = _lost_gpu_hours(task.gpus, policy.preempt_after_s, task.checkpoint_interval_s is not None)
    return policy.preemption and lost <= loss_cap_gpu_hours(task.gpus, policy.preempt_max_lost_gpu_hours) + 1e-12


def budget_gpu_hours(share: float, gpus: int, wait_s: float) -> float:
    """What preemption may throw away in total for a reservation's holder (`policy.preemption_budget_share`):
    `share` of `gpus` GPUs (`policy.preemption_budget_basis`: its own, or those its drain holds idle) over
    its wait of `wait_s` until the reservation's start."""
    return share * gpus * max(0.0, wait_s) / SECONDS_PER_HOUR


def ends_within_grace(lease: RunningLease, policy: Policy, now: float) -> bool:
    """True if the lease's estimate ends after `now` but within the preemption grace
    (`policy.preemption_spares_ending`: such a lease is spared). It gives its GPUs back by itself about
    as soon as a core task would wait before it may preempt, so preempting it would buy at most a grace
    of waiting and cost its write and a requeue. A lease past its estimate is not spared: when it ends
    is unknown."""
    return now < lease.estimated_end <= now + policy.preempt_after_s


FILLER, YIELDING = 1, 2  # `Victim.standard`: a standard filler, a standard lease that checkpoints


def standard_tier(lease: RunningLease, borrowing_standard: bool, checkpointing_standard: bool) -> int | None:
    """`Victim.standard` of a lease that is not opportunistic: FILLER for a standard lease that borrows the
    headroom (`borrowing_standard`), YIELDING for one that checkpoints on preemption (`checkpointing_standard`);
    None: no victim."""
    if lease.priority_class != _STANDARD:
        return None
    if borrowing_standard and lease.borrowed_headroom:
        return FILLER
    if checkpointing_standard and lease.checkpoints_on_preempt:
        return YIELDING
    return None


class VictimIndex:
    """Opportunistic leases still preemptible this cycle, per card type and node, cheapest first; with
    `borrowing_standard`, standard leases that borrow the headroom too (`RunningLease.borrowed_headroom`),
    after the opportunistic ones on each node (and a node that needs none of them before one that does); with
    `checkpointing_standard`, after those, every other standard lease that checkpoints on preemption — with
    `within_width` only for a task at least as wide as the lease's task (`Victim.width`), with `priced` only for a
    task whose wait costs more than the lease's restart (`yield_pays`, over the free GPUs now and the ends of the
    leases and of the cycle's grants and holds so far, `releases`)."""

    def __init__(self, leases: Iterable[RunningLease], fleet: Fleet, now: float,
                 max_lost_gpu_hours: float | None = float("inf"),
                 spared: Callable[[RunningLease], bool] | None = None, borrowing_standard: bool = False,
                 checkpointing_standard: bool = False, within_width: bool = False, priced: bool = False,
                 releases: Iterable[tuple] = ()) -> None:
        self._by_card: dict[str, dict[int, list[Victim]]] = {}
        opportunistic, rank_of = PriorityClass.OPPORTUNISTIC, fleet.rank_of  # read once: most leases are not
        any_standard = borrowing_standard or checkpointing_standard
        self._within_width = checkpointing_standard and within_width
        # Whether a YIELDING victim may be taken depends on the task (`_takes`): no failure is learnt by GPU count.
        self._per_task = checkpointing_standard and (within_width or priced)
        self._holes: HoleTimes | None = None  # `priced`: the hole estimates of `yield_pays`
        if self._per_task:
            leases = tuple(leases)
            widths = task_widths(leases)
            self._holes = HoleTimes(leases, fleet, now, releases) if priced else None
        for lease in leases:
            standard = 0
            if lease.priority_class != opportunistic:
                if not any_standard:
                    continue
                standard = standard_tier(lease, borrowing_standard, checkpointing_standard)
                if standard is None:
                    continue
            rank = rank_of.get(lease.node_id)
            if rank is None:
                continue
            if spared is not None and spared(lease):
                continue  # the policy spares it (`ends_within_grace`)
            lost = lost_gpu_hours(lease, now)
            if lost > loss_cap_gpu_hours(lease.gpus, max_lost_gpu_hours) + 1e-12:
                continue  # protected: preempting it would throw away too much work
            nodes = self._by_card.setdefault(fleet.card_of[rank], {})
            width = widths[lease.task_id] if standard == YIELDING and self._per_task else 0
            victim = Victim(lease, rank, fleet.card_of[rank], lost, standard, width)
            nodes.setdefault(rank, []).append(victim)
        for nodes in self._by_card.values():
            for victims in nodes.values():
                victims.sort(key=lambda victim: victim.order)
        self._heaps: dict[tuple[str, int, bool], list[tuple[tuple, int]]] = {}
        self._failed_at: dict[tuple[str, bool], int] = {}  # smallest GPU count no victims could make fit
        # (card type, GPUs, heavy, no limit) -> (`version`, the limit, its `limit_version`) of the last search that
        # found no victims (`fails_again`)
        self._failed_within: dict[tuple[str, int, bool, bool], tuple[int, Mapping[int, int] | None, object]] = {}
        self._cheapest: dict[str, list[Victim]] = {}  # per card type, for spanning tasks
        self._left = {card: sum(map(len, nodes.values())) for card, nodes in self._by_card.items()}
        self.version = 0  # grows whenever `may_help` may answer differently (victims taken, a failure learnt)
        self._victims_by_lease: dict[str, Victim] | None = None  # `_victim_of_lease`

    def has_victims(self) -> bool:
        return any(self._left.values())

    def may_help(self, pool: Pool, gpus: int, heavy: bool) -> bool:
        """False when preemption certainly cannot make `gpus` fit on this pool any more."""
        if not self._left.get(pool.card_type):
            return False
        return gpus > pool.max_node_gpus or gpus < self._failed_at.get((pool.card_type, heavy), gpus + 1)

    def choose(self, fleet: Fleet, pool: Pool, gpus: int, heavy: bool,
               limit: Mapping[int, int] | None = None, limit_version: object = None) -> VictimChoice | None:
        """The cheapest set of victims that makes the task fit on this pool, or None. `limit` caps
        the GPUs the task may take on given nodes (a reservation's guard): a node where it could not
        use what preemption frees is no choice — preempting there would only waste the victims' work.
        A task that spans nodes does not preempt under a limit. `limit_version`: a value that changes whenever
        `limit`'s caps may have changed — given (or no limit), a search that finds none is remembered
        (`fails_again`)."""
        if not self._by_card.get(pool.card_type):
            return None
        if gpus > pool.max_node_gpus:
            return None if limit is not None else self._choose_span(fleet, pool, gpus, heavy)
        key = (pool.card_type, heavy)
        if gpus >= self._failed_at.get(key, gpus + 1):
            return None
        choice = self._choose_single(fleet, pool, gpus, heavy, limit)
        if choice is None and limit is None and not self._per_task:
            # Victims and free GPUs only shrink during a cycle: no node fits a larger request either (unless a wider
            # task may take more victims: `_takes`).
            self._failed_at[key] = gpus
            self.version += 1
        if choice is None and (limit is None or limit_version is not None):
            self._failed_within[(pool.card_type, gpus, heavy, limit is None)] = (self.version, limit, limit_version)
        return choice

    def fails_again(self, pool: Pool, gpus: int, heavy: bool, limit: Mapping[int, int] | None,
                    limit_version: object) -> bool:
        """True only if `choose(fleet, pool, gpus, heavy, limit, limit_version)` would find no victims, and not
        making that call changes no later `choose`. None is found, changing nothing, for a card type without victims,
        at or above a failure learnt without a limit (`_failed_at`), or for a task that spans nodes under a limit.
        Else: the last search of this (card type, GPUs, heavy) under this limit (or without one) found none, and
        since then no victim was taken (`version`) and the limit stands (`limit_version`). That search popped every
        node of the heap and kept only those the limit rules out; only `commit` (which moves `version`) pushes nodes,
        so the same search now finds none too. Not searching leaves in the heap the nodes whose cost is now None,
        which the search would drop — harmless as long as such a node stays without cost until a `commit` pushes its
        fresh cost anyway: too few victims or too many heavy tasks stay so (victims and free GPUs only shrink, heavy
        counts only grow); only a node where the task fits without preemption could later gain a cost. So no node of
        the pool may have `gpus` free GPUs: fewer are free in all, or placing as many (or fewer) for a light task
        already found no node (`Pool.single_failed_at`)."""
        if not self._by_card.get(pool.card_type) or gpus >= self._failed_at.get((pool.card_type, heavy), gpus + 1):
            return True
        if gpus > pool.max_node_gpus:
            return limit is not None  # without a limit it looks across the pool (`_choose_span`): not remembered
        known = self._failed_within.get((pool.card_type, gpus, heavy, limit is None))
        return (known is not None and known[0] == self.version and known[1] is limit and known[2] == limit_version
                and (gpus > pool.free_total or gpus >= pool.single_failed_at[0]))

    def discard(self, lease_ids: Iterable[str], fleet: Fleet) -> None:
        """These leases were taken by another index of the cycle (or, under fifo, rank ahead of the task about to
        preempt: `cycle_preemption.ranks_ahead`): they are no victims here any more."""
        victim_of = self._victim_of_lease()
        taken = tuple(victim for lease_id in set(lease_ids) if (victim := victim_of.get(lease_id)) is not None)
        if taken:
            self.commit(VictimChoice(taken, ()), fleet)

    def _victim_of_lease(self) -> dict[str, Victim]:
        """Lease id -> its victim, of the victims still in the index (built on the first `discard`; `commit` keeps it):
        a discard then costs what it discards, not a scan of every victim."""
        if self._victims_by_lease is None:
            self._victims_by_lease = {victim.lease.lease_id: victim for nodes in self._by_card.values()
                                      for victims in nodes.values() for victim in victims}
        return self._victims_by_lease

    def commit(self, choice: VictimChoice, fleet: Fleet) -> None:
        """The victims are taken (and the held GPUs booked): no later task may count on them again.

        A node's cost can drop once its cheapest victims are gone, so its fresh cost is pushed into
        every heap of its card type (stale duplicates are discarded when popped).
        """
        touched, by_lease = set(), self._victims_by_lease
        for victim in choice.victims:
            self._by_card[victim.card_type][victim.rank].remove(victim)
            if by_lease is not None:
                by_lease.pop(victim.lease.lease_id, None)
            self._left[victim.card_type] -= 1
            self.version += 1
            if victim.card_type in self._cheapest:
                self._cheapest[victim.card_type].remove(victim)
            touched.add((victim.card_type, victim.rank))
        for (card_type, gpus, heavy), heap in self._heaps.items():
            for card, rank in touched:
                cost = self._node_cost(fleet, rank, gpus, heavy) if card == card_type else None
                if cost is not None:
                    heappush(heap, (cost, rank))

    def _choose_single(self, fleet: Fleet, pool: Pool, gpus: int, heavy: bool,
                       limit: Mapping[int, int] | None) -> VictimChoice | None:
        nodes = self._by_card[pool.card_type]
        heap = self._heaps.get((pool.card_type, gpus, heavy))
        if heap is None:
            costs = ((self._node_cost(fleet, rank, gpus, heavy), rank) for rank in nodes)
            heap = [(cost, rank) for cost, rank in costs if cost is not None]
            heapify(heap)
            self._heaps[(pool.card_type, gpus, heavy)] = heap
        skipped: list[tuple[tuple, int]] = []  # valid nodes the limit rules out (pushed back below)
        choice = None
        while heap:
            stored, rank = heappop(heap)
            current = self._node_cost(fleet, rank, gpus, heavy)
            if current is None:
                continue
            if current != stored:
                heappush(heap, (current, rank))
                continue
            if limit is not None and limit.get(rank, gpus) < gpus:
                skipped.append((current, rank))
                continue
            victims = self._victims_for(fleet, rank, gpus)  # `commit` pushes the node back
            free_needed = gpus - sum(victim.lease.gpus for victim in victims)
            choice = VictimChoice(tuple(victims), ((rank, max(0, free_needed)),))
            break
        for entry in skipped:
            heappush(heap, entry)
        return choice

    def _on_node(self, fleet: Fleet, rank: int, gpus: int) -> list[Victim]:
        """The node's victims, cheapest first, that a task of `gpus` GPUs may take (`_takes`)."""
        victims = self._by_card[fleet.card_of[rank]].get(rank, [])
        return [victim for victim in victims if self._takes(victim, gpus)] if self._per_task else victims

    def _takes(self, victim: Victim, gpus: int) -> bool:
        """True if a core task of `gpus` GPUs may take the victim: any victim but a YIELDING one, and that one only
        if no wider than the task (`within_width`) and if its yield pays (`priced`: `yield_pays`)."""
        if victim.standard != YIELDING:
            return True
        if self._within_width and victim.width > gpus:
            return False
        return self._holes is None or yield_pays(self._holes, victim.card_type, gpus, victim.width, victim.rank)

    def _victims_for(self, fleet: Fleet, rank: int, gpus: int) -> list[Victim]:
        needed = gpus - fleet.free_count[rank]
        chosen: list[Victim] = []
        for victim in self._on_node(fleet, rank, gpus):
            if needed <= 0:
                break
            chosen.append(victim)
            needed -= victim.lease.gpus
        return chosen

    def _node_cost(self, fleet: Fleet, rank: int, gpus: int, heavy: bool) -> tuple | None:
        """(standard victims, lost GPU-hours, victims, -latest start) to fit `gpus` on the node, or None if
        impossible."""
        needed = gpus - fleet.free_count[rank]
        if needed <= 0:
            return None  # it fits without preemption, or is blocked by something preemption cannot fix
        standard, lost, count, latest, heavy_freed = 0, 0.0, 0, float("-inf"), 0
        for victim in self._on_node(fleet, rank, gpus):
            lease = victim.lease
            standard += victim.standard
            lost += victim.lost_gpu_hours
            count += 1
            latest = max(latest, lease.started_at)
            heavy_freed += lease.heavy
            needed -= len(lease.gpu_indices)
            if needed <= 0:
                break
        if needed > 0 or (heavy and fleet.heavy[rank] - heavy_freed >= fleet.max_heavy):
            return None
        return (standard, lost, count, -latest)

    def _choose_span(self, fleet: Fleet, pool: Pool, gpus: int, heavy: bool) -> VictimChoice | None:
        """Cheapest victims across the pool until free + freed GPUs cover the task."""
        candidates = self._cheapest.get(pool.card_type)
        if candidates is None:
            nodes = self._by_card[pool.card_type]
            candidates = sorted((v for victims in nodes.values() for v in victims), key=lambda v: v.order)
            self._cheapest[pool.card_type] = candidates
        if self._per_task:
            candidates = [victim for victim in candidates if self._takes(victim, gpus)]
        if not candidates:  # no victim left on the pool: no choice (before a heavy task's free GPUs are summed
            return None  # over every node of the pool: ~2,000–3,000 nodes, 13 times per plan in the core-heavy variant)
        if heavy:
            available = sum(fleet.usable_free(rank, heavy) for rank in pool.ranks)
        else:
            available = pool.free_total
        chosen: list[Victim] = []
        for victim in candidates:
            if available >= gpus:
                break
            chosen.append(victim)
            available += victim.lease.gpus
        if available < gpus or not chosen:
            return None
        return VictimChoice(tuple(chosen), _span_holds(fleet, pool, gpus - sum(v.lease.gpus for v in chosen), heavy))


def _span_holds(fleet: Fleet, pool: Pool, gpus: int, heavy: bool) -> tuple[tuple[int, int], ...]:
    """Free GPUs to hold back for a spanning task: nodes with the most usable GPUs first."""
    rooms = sorted(((rank, fleet.usable_free(rank, heavy)) for rank in pool.ranks), key=lambda r: (-r[1], r[0]))
    holds = []
    for rank, room in rooms:
        if gpus <= 0 or room <= 0:
            break
        holds.append((rank, min(room, gpus)))
        gpus -= min(room, gpus)
    return tuple(holds)

