"""The knobs of a scheduling policy (`Policy`) and the enums some of them take. Named presets of it are in
`shared.scheduling.policies`; `plan()` reads one per cycle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class HeadroomCoreDemand(StrEnum):
    """Which core demand caps the headroom (`Policy.headroom_core_demand`, with `headroom_tracks_core`)."""

    PRESENT = "present"  # the GPUs core work holds or waits for
    RECENT = "recent"  # only core leases started and queued core tasks submitted within the last preemption grace
    QUEUED_OR_RECENT = "queued-or-recent"  # every queued core task and the core leases started within the grace


class PreemptionBudget(StrEnum):
    """What sets the budget of preemption that pays (`Policy.preemption_budget_basis`), per hour of the
    reservation holder's wait until its start."""

    WAIT = "wait"  # the holder's GPUs: the GPU-time its waiting costs it
    DRAIN = "drain"  # the reservation's GPUs free now: what its drain keeps idle if nothing backfills them


class PreemptAtOnce(StrEnum):
    """Which preemptions need not wait out the preemption grace (`Policy.preempt_at_once`). Only victims
    that checkpoint on preemption are ever taken at once: they lose their write (at most gpus x 60 s)
    whenever it comes, so the grace would only keep the preempting task waiting."""

    NEVER = "never"  # every preemption waits until the preempting task's grace is over
    FILLERS = "fillers"  # a reservation's holder reclaims the work filling its drain as soon as it is due
    CHECKPOINTING = "checkpointing"  # ... and a core task takes any victim that checkpoints, at once


@dataclass(frozen=True, slots=True)
class Policy:
    """Knobs of a scheduling policy. Baselines (fifo, priority, easy-backfill) are presets of it."""

    name: str = "cardflow"
    order: str = "cardflow"  # "cardflow" (class, priority, aging) | "priority" | "fifo"
    aging_per_hour: float = 1.0  # effective-priority points gained per hour waited
    headroom: float | Mapping[str, float] = 0.1  # share of each card type standard work may not take
    # ... but never more than the GPUs core work holds or waits for on the type (none: no headroom)
    headroom_tracks_core: bool = True
    max_heavy_per_node: int = 2
    quota_expiry_margin_s: float = 3600.0
    backfill: bool = True  # EASY reservation + backfill
    head_of_line_blocking: bool = False  # fifo/priority baselines: stop at the first task that does not fit
    readiness_gate: bool = True  # False only for readiness-blind baselines
    preemption: bool = True  # opportunistic work yields to core work
    preempt_after_s: float = 600.0  # a core task preempts only once it has waited this long
    # Never preempt a lease that would lose more than this; None: more than its own checkpoint write
    # (gpus x 60 s) — only work that checkpoints on preemption, or has just started, is a victim.
    preempt_max_lost_gpu_hours: float | None = None
    quota_expiry_gate: bool = True  # False: start tasks even if their quota expires before they end
    # Opportunistic work that checkpoints may run on GPUs the EASY reservation needs and yields them
    # (preempted) once the reservation is due: the drain before a wide task starts is not left idle.
    fill_reservations: bool = True
    # Opportunistic work covers the headroom only with GPUs core work could have within the preemption
    # grace: the lease ends by then (its estimate), or preempting it then loses no more than the cap.
    # False: every opportunistic GPU counts, also multi-day work that can never be preempted.
    headroom_counts_reclaimable_only: bool = False
    # Which core demand caps the headroom (with `headroom_tracks_core`): "present" = the GPUs core work
    # holds or waits for; "recent" = only the core demand seen within the last preemption grace (core
    # leases started and queued core tasks submitted since `now - preempt_after_s`); "queued-or-recent"
    # = every queued core task and the core leases started since then.
    headroom_core_demand: HeadroomCoreDemand = HeadroomCoreDemand.PRESENT
    # A lease whose estimate ends within the preemption grace is never a victim: it gives its GPUs
    # back by itself about as soon, and preempting it would only cost its write and a requeue.
    preemption_spares_ending: bool = False
    # Which preemptions need not wait out `preempt_after_s` (victims that checkpoint on preemption only):
    # "never"; "fillers" = a reservation's holder reclaims its fillers as soon as it is due;
    # "checkpointing" = that, and a core task takes victims that checkpoint at once.
    preempt_at_once: PreemptAtOnce = PreemptAtOnce.NEVER
    # Preemption that pays for its loss: the core task holding the cycle's reservation, once past its
    # grace, may preempt opportunistic leases that lose in total up to this share of a budget — the
    # wait until the reservation's start times the GPUs of `preemption_budget_basis` — whatever each
    # one's own cap (`preempt_max_lost_gpu_hours`); the cheapest such set. 0: off.
    preemption_budget_share: float = 0.0
    preemption_budget_basis: PreemptionBudget = PreemptionBudget.WAIT
    # Standard work borrows the headroom, as opportunistic work does, while its estimate ends within this
    # many preemption graces (`preempt_after_s`; preemption on): running standard leases that end by then
    # and this cycle's standard grants that short count as covering the headroom — they give their GPUs
    # back by themselves about as soon as a preemption would. 0: off (only the grant rule of one grace).
    standard_borrows_within_graces: float = 0.0
    # Standard work that checkpoints may take headroom GPUs as a filler does: such a grant borrows them
    # (`Grant.borrowed_headroom`, carried by its lease), counts as covering the headroom, and its lease is a
    # victim of core work past its grace, after every opportunistic victim — preempting it loses only its
    # checkpoint write. The dispatcher keeps the flag in its lease rows (`leases.borrowed_headroom`), so a
    # dispatcher that reloads them plans as the simulator does.
    checkpointing_standard_borrows: bool = True
    # ... and a core task takes such fillers at once, inside its grace too (they lose only their write, now or
    # later); opportunistic victims still wait for the grace (`preempt_at_once` decides those).
    fillers_yield_at_once: bool = True
    # ... but only where no ready opportunistic task waits that the free GPUs of the card type could hold: the
    # headroom idles only where nothing opportunistic would borrow it, and a filler taking GPUs opportunistic work
    # would have borrowed turns a cheap preemption into a standard restart (docs/BENCHMARKS.md, policy session 20).
    fillers_after_opportunistic: bool = True
    # Core work past its grace may also preempt standard leases that checkpoint on preemption and did not borrow
    # the headroom (after every opportunistic victim and filler): what standard work took beyond the headroom comes
    # back to a core burst at the cost of a checkpoint write each. Not simulator-only: it reads only a lease's class
    # and `checkpoints_on_preempt`, which the dispatcher's snapshot carries too (`shared/leasing/snapshot.py`).
    checkpointing_standard_yields: bool = False
    # ... but only to a core task at least as wide as the yielding standard task (its GPUs over all its leases): its
    # checkpoint write is not what yielding costs, its restart is — requeued, it must find all its GPUs free at once,
    # and a task wider than the one that took its GPUs needs a larger hole than that task leaves (`Victim.width`).
    standard_yields_within_width: bool = False
    # ... but only when the yield pays (shared/scheduling/yield_price.py): the core task's GPUs × its wait for a hole
    # that size without preempting exceed the yielding task's width × its wait for a hole of its width once the core
    # task holds its node — both from the snapshot's free GPUs and leases' estimated ends, which the dispatcher's
    # snapshot carries too. An as-wide victim then never yields (it would only swap who waits for the same hole).
    standard_yields_priced: bool = False
    # ... and priced against the drain it lengthens too (shared/scheduling/yield_drain.py): taken only when the core
    # task's GPUs × its wait exceed the yielding tasks' restarts plus the drain holder's GPUs (the widest waiting task
    # that is not core and fits nowhere now) × how much later the nodes the yield touches (the core task's, the one
    # each requeued task restarts on) can next hold it — from the snapshot's free GPUs and leases' estimated ends and
    # the queue, which the dispatcher passes plan() too.
    standard_yields_drain_priced: bool = False
    # ... with the pin priced by how much later the k-th hole of the drain holder's width opens over the card type's
    # nodes, k the waiting tasks that wide (yield_drain.py), instead of each touched node's delay summed: a node pinned
    # while enough others empty for the wide backlog sooner costs nothing.
    standard_yields_drain_kth_hole: bool = False
    # ... with a requeued task's restart (its price, and from when it pins the node it restarts on) waiting also until
    # the card type's free GPUs exceed what the headroom keeps from standard work by its width, and the drain holder
    # counted as fitting now only where the headroom lets it start (yield_drain.py).
    standard_yields_restart_after_headroom: bool = False
    # ... and until the card type's free GPUs exceed also the GPUs of the ready standard tasks that rank ahead of the
    # requeued task in the queue (restart_queue.py): they take the GPUs that come free before it does.
    standard_yields_restart_after_queue: bool = False
    # ... but `standard_yields_within_width` only until the core task has waited this long since its submission: from
    # then on it takes wider victims too. A no-wider victim restarts wherever the core task could have started, so
    # most yields swap work without leaving a hole to drain; the tail of a burst that no such victim serves waits at
    # most this long for one (docs/BENCHMARKS.md, "Which yields the core goal needs (session 23)"). It reads only
    # the task's submission, which the dispatcher's queue carries too. None: the width rule holds whatever the wait.
    standard_yields_any_width_after_s: float | None = None
    # A standard reservation holder reclaims the fillers of its reservation only if the headroom would then let it
    # start (free + borrowed GPUs minus its own at least the headroom it must leave): preempting borrowed fillers
    # leaves that sum as it is, so a holder the headroom refuses would preempt them again and again. False: it
    # reclaims them whenever the reservation is due only because they yield.
    holder_reclaims_within_headroom: bool = True
    # ... and once a standard holder has reclaimed its fillers, the rest of the cycle leaves it the headroom it counted
    # on: on that card type, standard work that returns within the grace may no longer use headroom GPUs (it would
    # leave free + borrowed below what the holder must leave, so the next plan would refuse the holder, the
    # fillers would refill its GPUs, and it would reclaim them again).
    reclaiming_holder_keeps_headroom: bool = False
    # The reservation's holder, past its grace and waiting at least `consolidate_after_s` for its start, takes a node
    # whose every lease checkpoints on preemption and fits now on the card type's other free GPUs (shared/scheduling/
    # consolidation.py): the moved tasks lose their writes and restart at once, the holder starts on the node instead
    # of hours later while as many GPUs idle scattered across nodes. Preemption on. Off in every preset.
    holder_consolidates: bool = False
    consolidate_after_s: float = 3600.0
