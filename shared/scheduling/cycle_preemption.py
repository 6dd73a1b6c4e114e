"""Preemption inside one cycle: who may preempt, from which victims, and the preemption itself.

`CyclePreemption` is a part of `Cycle` (a mixin over the cycle's working state). A core task may preempt once
its grace is over (`_may_preempt`; inside it the plan asks to be revisited, `Plan.revisit_at`); its victims come
from one of the lazily built victim indexes (`_victim_index_for`: any victim, not standard ones, those a task may
take inside its grace — `_within_grace_victim_index` — or within a GPU-hour budget, past the grace only); `_preempt` takes the cheapest victims that let it start, holds their
GPUs for it and records what later reservations may count on. Under fifo a lease whose task ranks ahead of
the preemptor is no victim of it (`ranks_ahead`). With `policy.standard_yields_drain_priced` a choice that takes a
standard lease which yields is priced against the drain it lengthens too (`_drain_paying`, yield_drain.py): refused,
the next node's choice is tried.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from functools import partial

from shared.scheduling import reasons
from shared.scheduling.backfill import Release, ReservationGuard
from shared.scheduling.model import (
    CardOption,
    DeferralReason,
    Preemption,
    PriorityClass,
    QueuedTask,
    RunningLease,
    enum_members,
)
from shared.scheduling.policy_knobs import PreemptAtOnce, PreemptionBudget
from shared.scheduling.placement import Pool
from shared.scheduling.preemption import (
    YIELDING,
    VictimChoice,
    VictimIndex,
    budget_gpu_hours,
    ends_within_grace,
    not_reclaimable_at_once,
)
from shared.scheduling.restart_queue import QueueAhead
from shared.scheduling.yield_drain import CoreTake, DrainHolder, DrainInputs, drain_yield_pays
from shared.scheduling.yield_price import HoleTimes, task_widths

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
P = enum_members(PriorityClass)



class CyclePreemption:
    """Preemption for `Cycle`."""

    __slots__ = ()  # `Cycle` declares the slots of its working state

    def _may_preempt(self, task: QueuedTask) -> bool:
        """True for core work (preemption on) that has waited `policy.preempt_after_s` since its
        submission. A core task still inside that grace may not preempt yet: GPUs often come free by
        themselves, and every preemption costs a checkpoint write and a restart. The plan then asks to
        be revisited when the earliest grace ends (`Plan.revisit_at`). With `policy.preempt_at_once` =
        `"checkpointing"` or `policy.fillers_yield_at_once` it may, but only the victims those settings let it take
        at once (`_within_grace_victim_index`)."""
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

    def _preempt(self, task: QueuedTask, options: Sequence[CardOption], budget: float | None = None,
                 reclaiming: bool = False) -> bool:
        """Preempt the cheapest victims that let the task start on one of its card options. Under the
        cycle's reservation (the task would still run at its start), only where the guard lets the
        task use the freed GPUs: otherwise they would idle and the victims' work be wasted. With a
        `budget` (GPU-hours): any opportunistic lease not yet taken may be a victim, whatever the loss
        cap, as long as the victims lose no more than the budget in total (`_preempt_within_budget`). `reclaiming`:
        the task is the reservation's holder taking back the GPUs its fillers hold (`_reclaim_from_fillers`)."""
        index = self._victim_index_for(task, reclaiming) if budget is None else self._budget_victim_index(budget)
        if self._fifo:
            self._discard_ranked_ahead(index, task)
        for option in options:
            pool = self.fleet.pools.get(option.card_type)
            if pool is None:
                continue
            end = self.now + option.runtime_s
            guard = self.guard if self.guard is not None and self.guard.applies(option.card_type, end) else None
            if guard is not None and task.gpus > guard.room(False):  # core work borrows nothing
                continue
            limit, limit_version = (guard.limit(task.heavy), guard.limit_version(task.heavy)) if guard else (None, None)
            choice = index.choose(self.fleet, pool, task.gpus, task.heavy, limit, limit_version)
            if choice is not None and self._drain_priced:
                choice = self._drain_paying(index, task, option, choice, limit)
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
            for other in (self._victims, self._victims_not_core, self._victims_any_width,
                          *self._victims_at_once.values()):
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

    def _preemption_fails_again(self, task: QueuedTask) -> bool:
        """True only if `_preempt(task, task.options)` would preempt nothing and not calling it changes no later
        choice: a core task past its grace whose card types are all in the fleet, none with room now (the caller
        checked: `Fleet.may_have_room`), and on every option `_preempt` does not pass over the last victim search of
        its GPUs found none since, under the reservation's guard if it applies (`VictimIndex.fails_again`). Not under
        fifo (whose `_discard_ranked_ahead` changes the index per task), nor before the reservation."""
        if self._fifo or self.guard is None or self._inside_grace(task):
            return False
        index = self._built_victim_index_past_grace(task)
        if index is None:
            return False
        guard, pools, end_from = self.guard, self.fleet.pools, self.now
        gpus, heavy = task.gpus, task.heavy
        for option in task.options:
            pool = pools.get(option.card_type)
            if pool is None:
                return False
            if not guard.applies(option.card_type, end_from + option.runtime_s):
                if not index.fails_again(pool, gpus, heavy, None, None):
                    return False
            elif gpus <= guard.room(False) and not index.fails_again(pool, gpus, heavy, guard.limit(heavy),
                                                                      guard.limit_version(heavy)):
                return False  # (a task wider than the guard's room: `_preempt` passes the option over)
        return True

    def _built_victim_index_past_grace(self, task: QueuedTask) -> VictimIndex | None:
        """`_victim_index_for(task)` of a core task past its grace if that index is built already and asking it
        has no side effect (no index built, no revisit asked); else None."""
        if self._any_width_after_s is None:
            return self._victims
        return self._victims_any_width if self.now >= task.submitted_at + self._any_width_after_s else None

    def _drain_paying(self, index: VictimIndex, task: QueuedTask, option: CardOption, choice: VictimChoice,
                      limit: Mapping[int, int] | None) -> VictimChoice | None:
        """`choice`, or the cheapest choice on another node, whose yields pay once the drain they lengthen is counted
        (`policy.standard_yields_drain_priced`: yield_drain.py); None if none does. A refused node is left out of the
        next choice; a task spanning nodes gets no other."""
        excluded = dict(limit or {})
        pool = self.fleet.pools[option.card_type]
        while choice is not None and not self._yield_pays_with_drain(task, option, choice):
            if task.gpus > pool.max_node_gpus:
                return None
            excluded.update((rank, 0) for rank, _ in choice.holds)
            choice = index.choose(self.fleet, pool, task.gpus, task.heavy, excluded)
        return choice

    def _yield_pays_with_drain(self, task: QueuedTask, option: CardOption, choice: VictimChoice) -> bool:
        """True if the choice takes no yielding standard lease, or if its yields pay (`drain_yield_pays`)."""
        if all(victim.standard != YIELDING for victim in choice.victims):
            return True
        inputs = self._drain_inputs()
        core = CoreTake(option.card_type, task.gpus, self.now + option.runtime_s)
        return drain_yield_pays(inputs.holes, choice, core, inputs.holder, inputs.widths)

    def _drain_inputs(self) -> DrainInputs:
        """The hole estimates over the cycle as it is now (free GPUs, the leases not preempted, the cycle's grants
        and holds), the drain holder (`_drain_holder`) and the task widths — made again after a grant or preemption."""
        state = self._drain_state
        if state is None or state.changes != self.changes:
            leases = [lease for lease in self.leases if lease.lease_id not in self._preempted]
            kept = self._headroom_kept_from_standard() if self.policy.standard_yields_restart_after_headroom else None
            ahead = self._queue_ahead().gpus_ahead if self.policy.standard_yields_restart_after_queue else None
            holes = HoleTimes(leases, self.fleet, self.now, [release for _, release in self._releases], kept, ahead)
            widths = state.widths if state is not None else task_widths(self.leases)
            state = self._drain_state = DrainInputs(self.changes, holes, self._drain_holder(), widths)
        return state

    def _queue_ahead(self) -> QueueAhead:
        """The ready standard tasks of the queue per card type (`policy.standard_yields_restart_after_queue`:
        restart_queue.py), made once per cycle."""
        if self._restart_queue is None:
            self._restart_queue = QueueAhead(self._ready_queue(), self.policy, self.now)
        return self._restart_queue

    def _drain_holder(self) -> DrainHolder | None:
        """The task whose drain a yield may lengthen: the widest queued task that is not core, is ready, its quota
        allows on some card option (`_quota_card_types`: one it refuses drains nothing — it could not start on the
        drained GPUs) and fits nowhere now (best fit, on those options; headroom aside; the first of equals). Not the
        first such task only: a pinned
        node keeps every wider task behind it waiting too. Core tasks are passed over: past their grace they preempt,
        so their drains are short; the drains that idle GPUs for hours are wide standard tasks' (docs/BENCHMARKS.md,
        policy session 19). None: no such task. The candidates are ranked once per cycle, widest first, and the scan
        stops at the first that fits now. With `policy.standard_yields_drain_kth_hole` the holder carries how many
        candidates are that wide (`DrainHolder.backlog`)."""
        if self._drain_candidates is None:
            ready = [(-task.gpus, position, task) for position, task in enumerate(self._ready_queue())
                     if task.priority_class != P.CORE]
            self._drain_candidates = [task for _, _, task in sorted(ready, key=lambda item: item[:2])]
        fleet = self.fleet
        for position, task in enumerate(self._drain_candidates):
            pools = [fleet.pools[card_type] for card_type in self._quota_card_types(task) if card_type in fleet.pools]
            if not pools:
                continue
            if any(fleet.place(pool, task.gpus, task.heavy) is not None and not self._headroom_keeps_out(task, pool)
                   for pool in pools):
                return None  # it fits now, and so, nearly always, does every narrower one: not scanned
            backlog = self._drain_backlog(position) if self.policy.standard_yields_drain_kth_hole else None
            return DrainHolder(task.gpus, frozenset(pool.card_type for pool in pools), backlog)
        return None

    def _quota_card_types(self, task: QueuedTask) -> list[str]:
        """The card types of the task's options its project's quota allows now (all for a project without quota)."""
        options = self.quota.usable_options(task)[0] if task.project in self._limited else task.options
        return [option.card_type for option in options]

    def _headroom_kept_from_standard(self) -> dict[str, int]:
        """Per card type: the headroom's GPUs less what opportunistic work borrows of them — free GPUs a requeued
        standard task may not restart on (`policy.standard_yields_restart_after_headroom`)."""
        return {card_type: max(0, pool.headroom - self.borrowed.of(card_type)) for card_type, pool in self.fleet.pools.items()}

    def _headroom_keeps_out(self, task: QueuedTask, pool: Pool) -> bool:
        """With `policy.standard_yields_restart_after_headroom`: True if the headroom keeps the (standard) task out of
        the pool now (`_eats_headroom`, as a task that holds no reservation)."""
        return self.policy.standard_yields_restart_after_headroom and self._eats_headroom(task, pool, False)

    def _drain_backlog(self, position: int) -> int:
        """How many drain candidates from `position` on (widest first) are as wide as the one there."""
        candidates = self._drain_candidates
        gpus, count = candidates[position].gpus, 0
        for task in candidates[position:]:
            if task.gpus != gpus:
                break
            count += 1
        return count

    def _discard_ranked_ahead(self, index: VictimIndex, task: QueuedTask) -> None:
        """Under fifo: no lease whose task ranks ahead of `task` (`ranks_ahead`) stays a victim in `index`. Those
        leases are a prefix of the leases sorted by (submission, task id) (`_leases_by_submission`), and an index's
        discards stand for the rest of the cycle, so each index keeps how long a prefix it has discarded and
        discards only what the task's prefix adds: over a walk each lease is discarded at most once per index, not
        scanned once per preemptor."""
        keys, lease_ids = self._leases_by_submission()
        stop = bisect_left(keys, (task.submitted_at, task.task_id))  # the leases before `stop` rank ahead
        done = self._ranked_ahead_discarded.get(index, 0)
        if stop > done:
            index.discard(lease_ids[done:stop], self.fleet)
            self._ranked_ahead_discarded[index] = stop

    def _leases_by_submission(self) -> tuple[list[tuple[float, str]], list[str]]:
        """The (submission, task id) of the leases that may be victims and whose submission is known, sorted, and
        their lease ids in the same order (made once per cycle)."""
        if self._by_submission is None:
            ranked = sorted((lease.submitted_at, lease.task_id, lease.lease_id) for lease in self._victim_leases
                            if lease.submitted_at is not None)
            self._by_submission = ([(submitted_at, task_id) for submitted_at, task_id, _ in ranked],
                                   [lease_id for _, _, lease_id in ranked])
        return self._by_submission

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

    def _preempt_within_budget(self, task: QueuedTask, options: Sequence[CardOption], guard: ReservationGuard) -> bool:
        """Preemption that pays (`policy.preemption_budget_share`): the reservation's holder, a core task
        past its grace, would otherwise wait until the guard's start; it preempts now if the cheapest
        victims lose in total no more than the budget that wait sets (`budget_gpu_hours`, over the holder's
        GPUs or — basis "drain" — the reservation's GPUs free now, which its drain holds). True if it did.
        Inside its grace, never: the budget's victims are any opportunistic ones, and a core task that may
        preempt there (`_may_preempt`) may take only those `_within_grace_victim_index` holds."""
        policy = self.policy
        share = policy.preemption_budget_share
        if share <= 0 or guard.start_at <= self.now or not self._may_preempt(task) or self._inside_grace(task):
            return False
        gpus = task.gpus
        if PreemptionBudget(policy.preemption_budget_basis) is PreemptionBudget.DRAIN:
            gpus = guard.free_now(self.fleet)
        budget = budget_gpu_hours(share, gpus, guard.start_at - self.now)
        return budget > 0 and self._preempt(task, options, budget)

    def _borrows(self, lease: RunningLease) -> bool:
        """True if the running lease's GPUs count as headroom (`Borrowed`)."""
        counts = self.borrowed.counts
        borrowing = lease.priority_class == P.OPPORTUNISTIC or (
            self._fillers and lease.borrowed_headroom and lease.priority_class == P.STANDARD)
        return borrowing and (counts is None or counts(lease))

    def _victim_index(self) -> VictimIndex:
        if self._victims is None:
            self._victims = self._past_grace_victim_index(self.policy.standard_yields_within_width)
        return self._victims

    def _past_grace_victim_index(self, within_width: bool) -> VictimIndex:
        """A new index of the leases not preempted yet this cycle (`_at_once_victim_index` may have preempted first)
        that a core task past its grace may take, standard leases that checkpoint only if no wider than the task with
        `within_width` (`_victim_index`, `_any_width_victim_index`)."""
        return VictimIndex(self._leases_not_preempted(), self.fleet, self.now, self.policy.preempt_max_lost_gpu_hours,
                           self._spared_ending(), borrowing_standard=self._fillers,
                           checkpointing_standard=self._standard_yields, within_width=within_width,
                           priced=self.policy.standard_yields_priced,
                           releases=[release for _, release in self._releases])

    def _leases_not_preempted(self) -> Sequence[RunningLease]:
        """The leases any victim index reads (`_victim_leases`) without those preempted already this cycle."""
        if not self._preempted:
            return self._victim_leases
        return [lease for lease in self._victim_leases if lease.lease_id not in self._preempted]

    def _spared_ending(self):
        """The rule that spares victims ending within the grace (`policy.preemption_spares_ending`), or None."""
        return partial(ends_within_grace, policy=self.policy, now=self.now) if self.policy.preemption_spares_ending else None

    def _inside_grace(self, task: QueuedTask) -> bool:
        """True while the task's preemption grace (`policy.preempt_after_s` since its submission) lasts."""
        return self.now < self._grace_ends(task)

    def _victim_index_for(self, task: QueuedTask, reclaiming: bool = False) -> VictimIndex:
        """The victims the task may take now: inside its grace only what reclaiming at once allows
        (`_within_grace_victim_index`); past it any (`_victim_index`) — or for a core task that has waited
        `policy.standard_yields_any_width_after_s`, any whatever `policy.standard_yields_within_width` says
        (`_any_width_victim_index`; before then the plan asks to be revisited when that wait ends) — or for a
        reservation's holder that is not core, reclaiming its fillers, any but standard leases
        (`_not_core_victim_index`)."""
        if self._inside_grace(task):
            return self._within_grace_victim_index(task, reclaiming)
        if self._standard_victims and task.priority_class != P.CORE:  # a reservation's holder reclaiming its fillers
            return self._not_core_victim_index()
        if self._any_width_after_s is not None:
            any_width_from = task.submitted_at + self._any_width_after_s
            if self.now >= any_width_from:
                return self._any_width_victim_index()
            self._revisit(any_width_from)
        return self._victim_index()

    def _within_grace_victim_index(self, task: QueuedTask, reclaiming: bool) -> VictimIndex:
        """The victims a task inside its grace may take: the union of what each setting allows. Opportunistic
        leases that checkpoint on preemption with `policy.preempt_at_once` = `"checkpointing"`, or `"fillers"` for
        the reservation's holder `reclaiming` its fillers; the standard leases that borrow the headroom for a core
        task with `policy.fillers_yield_at_once`. Each loses only its checkpoint write, now or a grace later. Both:
        one index of both, opportunistic victims first on each node (`Victim.order`). Neither: no victim (no path
        preempts then; the grace is kept)."""
        opportunistic = self._at_once is PreemptAtOnce.CHECKPOINTING or (reclaiming and self._at_once is not PreemptAtOnce.NEVER)
        fillers = self._fillers_at_once and task.priority_class == P.CORE
        index = self._victims_at_once.get((opportunistic, fillers))
        if index is None:
            index = self._victims_at_once[opportunistic, fillers] = self._at_once_victim_index(opportunistic, fillers)
        return index

    def _at_once_victim_index(self, opportunistic: bool, fillers: bool) -> VictimIndex:
        """A new index of the leases not preempted yet this cycle that a task inside its grace may take: opportunistic
        ones that checkpoint on preemption (`not_reclaimable_at_once` leaves the others out, and those
        `policy.preemption_spares_ending` spares), standard fillers (`lease.borrowed_headroom`), or both."""
        preempted = self._preempted
        if fillers and not opportunistic:
            leases = [lease for lease in self._victim_leases if lease.borrowed_headroom
                      and lease.priority_class == P.STANDARD and lease.lease_id not in preempted]
            return VictimIndex(leases, self.fleet, self.now, self.policy.preempt_max_lost_gpu_hours, borrowing_standard=True)
        leases = [lease for lease in self._victim_leases if lease.lease_id not in preempted] if opportunistic else []
        not_at_once = partial(_not_taken_at_once, spared=self._spared_ending())
        return VictimIndex(leases, self.fleet, self.now, self.policy.preempt_max_lost_gpu_hours, not_at_once,
                           borrowing_standard=fillers)

    def _not_core_victim_index(self) -> VictimIndex:
        """`_victim_index` without standard leases (only core work may take those: fillers, and with
        `policy.checkpointing_standard_yields` those that checkpoint), and without those preempted already this
        cycle."""
        if self._victims_not_core is None:
            self._victims_not_core = VictimIndex(self._leases_not_preempted(), self.fleet, self.now,
                                                 self.policy.preempt_max_lost_gpu_hours, self._spared_ending())
        return self._victims_not_core

    def _any_width_victim_index(self) -> VictimIndex:
        """`_victim_index` with standard leases that checkpoint taken whatever their task's width
        (`policy.standard_yields_any_width_after_s`), without those preempted already this cycle."""
        if self._victims_any_width is None:  # (only with `checkpointing_standard_yields`: `Cycle._any_width_after_s`)
            self._victims_any_width = self._past_grace_victim_index(within_width=False)
        return self._victims_any_width

    def _budget_victim_index(self, budget: float) -> VictimIndex:
        """Every opportunistic lease not preempted yet this cycle whose loss alone stays within `budget`."""
        return VictimIndex(self._leases_not_preempted(), self.fleet, self.now, budget, self._spared_ending())


def _not_taken_at_once(lease: RunningLease, spared=None) -> bool:
    """`not_reclaimable_at_once` for an opportunistic lease; a standard lease in an index of `_at_once_victim_index`
    is a filler, always taken (fillers checkpoint: they lose only their write)."""
    return lease.priority_class == P.OPPORTUNISTIC and not_reclaimable_at_once(lease, spared)


def ranks_ahead(lease: RunningLease, task: QueuedTask) -> bool:
    """Under fifo: True if the lease's task was submitted before `task` (ties: by id). Preempted for `task`, it would
    be back in the queue ahead of it and the next plan would give it the GPUs it gave up, again and again (a plan that
    never settles); so it is no victim of `task`. A lease whose submission is unknown ranks behind every task."""
    submitted_at = lease.submitted_at
    return submitted_at is not None and (submitted_at, lease.task_id) < (task.submitted_at, task.task_id)
