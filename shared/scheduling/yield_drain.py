"""Whether a yield pays once the drain it lengthens is counted (`Policy.standard_yields_drain_priced`).

The restart price (yield_price.py) weighs the core task's wait against the victim's own restart. What it cannot see
is where the requeued victim restarts and what the core task holds meanwhile: a long one-GPU task that yields to a
minute-long core task restarts on another node and pins it for the rest of its estimate, and a wide task waiting for
a node to empty — the cycle's reservation — waits hours longer while the GPUs its drain collects idle
(docs/BENCHMARKS.md, policy sessions 18 and 19). So a yield is also priced against the cycle's drain holder
(`DrainHolder`: the widest waiting task that is not core and fits nowhere now — a node pinned keeps every task that
wide waiting, not only the reservation's holder; core tasks preempt once past their grace and so drain briefly;
`CyclePreemption._drain_holder`):

- what it saves: the core task's GPUs × its wait for a hole of that many GPUs without preempting (as before);
- what it costs: each yielding task's width × its wait for a hole of its width on another node (its restart, as
  before), plus the holder's GPUs × how much later the nodes the yield touches can next hold the holder's width,
  summed over the nodes it delays (`drain_delay`). Touched: the victims' node holds the core task until its
  estimated end instead of the victims until theirs; a yielding task of one lease pins the node it restarts on
  (`HoleTimes.restart_node`) from now until its restart plus the rest of its estimate. A node the yield empties
  sooner counts nothing: narrow work refills it long before a wide task's drain could use it (in session 18's worst
  unit a yielded one-GPU task restarted on its own node again, and the other on the node a wide task drained).

Summing each touched node's delay counts it as if the holder needed exactly that node; with several nodes emptying
for the wide backlog a pinned node costs less than that. With `Policy.standard_yields_drain_kth_hole` the pin is
priced instead by how much later the k-th hole of the holder's width opens over the card type's nodes, k the waiting
tasks that wide (`DrainHolder.backlog`; `HoleTimes.kth_opening`): a node pinned while k other nodes empty sooner
costs nothing, one the k-th of that backlog would have started on costs the delay until the next hole.

Both prices assumed a requeued task restarts in any hole of its width. Where the headroom is kept, the free GPUs a
standard task may take are fewer: in a core-heavy unit the yielded one-GPU tasks were priced to restart at once on a
free GPU, and waited 5 h — the free GPUs were the headroom (docs/BENCHMARKS.md, policy session 20). With
`Policy.standard_yields_restart_after_headroom` a restart (its price, and the node it pins from when) waits too until
the card type's free GPUs exceed what the headroom keeps from standard work (its GPUs less what opportunistic work
borrows) by the task's width, the core task's take counted (`HoleTimes.restart_wait`), and the drain holder fits "now" only where the headroom
lets it start.

A yield is taken only when it saves more than it costs (`drain_yield_pays`). Everything is read from the cycle's
snapshot (free GPUs, the leases' estimated ends, the cycle's grants and holds) and its queue, which the dispatcher
hands plan() as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.scheduling.preemption import YIELDING, Victim, VictimChoice
from shared.scheduling.yield_price import NEVER, HoleTimes

NodeState = tuple[int, list[tuple[float, int]]]  # a node's free GPUs and (end, GPUs) of what holds the rest


@dataclass(frozen=True, slots=True)
class DrainHolder:
    """The task whose drain a yield may lengthen: its GPUs and the card types it may run on; `backlog`, with
    `Policy.standard_yields_drain_kth_hole`: how many waiting tasks are that wide, itself included (None: the touched
    nodes' delays are summed)."""

    gpus: int
    card_types: frozenset[str]
    backlog: int | None = None


@dataclass(frozen=True, slots=True)
class DrainInputs:
    """What a cycle prices yields with, as of its `changes`-th grant or preemption: the hole estimates, the drain
    holder and the GPUs of each running task over all its leases (`CyclePreemption._drain_inputs`)."""

    changes: int
    holes: HoleTimes
    holder: DrainHolder | None
    widths: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class CoreTake:
    """What the preempting core task takes: its GPUs on a card type until its estimated end."""

    card_type: str
    gpus: int
    end: float


def drain_yield_pays(holes: HoleTimes, choice: VictimChoice, core: CoreTake, holder: DrainHolder | None,
                     widths: Mapping[str, int]) -> bool:
    """True if the core task's GPUs × its wait without preempting exceed the yielding tasks' restarts plus the
    GPU-time the yield adds to the holder's drain (module docstring). `widths`: task id -> GPUs over its leases."""
    saved = core.gpus * holes.wait(core.card_type, core.gpus)
    # what restarts see past the headroom and the queue ahead
    taken = nodes_after_take(holes, choice, core) if holes.kept or holes.ahead else None
    restarts = 0.0
    for width, victim in _yielding_tasks(choice, widths):
        restarts += width * holes.restart_wait(core.card_type, width, victim.rank, taken, victim.lease)
    return saved > restarts + drain_cost(holes, choice, core, holder, widths)


def drain_cost(holes: HoleTimes, choice: VictimChoice, core: CoreTake, holder: DrainHolder | None,
               widths: Mapping[str, int]) -> float:
    """GPU-seconds: the holder's GPUs × `drain_delay` (0 without a holder on the core task's card type)."""
    if holder is None or core.card_type not in holder.card_types:
        return 0.0
    changed = nodes_after_yield(holes, choice, core, widths)
    return holder.gpus * max(0.0, drain_delay(holes, core.card_type, holder.gpus, changed, holder.backlog))


def nodes_after_yield(holes: HoleTimes, choice: VictimChoice, core: CoreTake,
                      widths: Mapping[str, int]) -> dict[int, NodeState]:
    """The free GPUs and ends of the nodes the yield touches, as they would be after it (module docstring): the
    core task's take (`nodes_after_take`), and each requeued task of one lease on the node it restarts on."""
    changed = nodes_after_take(holes, choice, core)
    taken = {rank: (free, list(ends)) for rank, (free, ends) in changed.items()} if holes.kept or holes.ahead else None
    for width, victim in _yielding_tasks(choice, widths):
        # a task of one lease; one spanning nodes restarts wherever a hole that wide opens: not counted
        restart = (holes.restart_node(core.card_type, width, victim.rank, taken, victim.lease)
                   if width == victim.lease.gpus else None)
        if restart is not None:
            where, at = restart
            free, ends = changed.get(where) or (holes.free[where], list(holes.ends.get(where, ())))
            changed[where] = (free - width, [*ends, (at + max(0.0, victim.lease.estimated_end - holes.now), width)])
    return changed


def nodes_after_take(holes: HoleTimes, choice: VictimChoice, core: CoreTake) -> dict[int, NodeState]:
    """The free GPUs and ends of the victims' and held nodes once the core task holds them until its estimated end
    instead of the victims until theirs (as `CyclePreemption._release_victims` counts them)."""
    now, changed = holes.now, {}

    def add(rank: int, free: int, end: float | None = None, gpus: int = 0) -> list[tuple[float, int]]:
        current, ends = changed.get(rank) or (holes.free[rank], list(holes.ends.get(rank, ())))
        if end is not None:
            ends.append((end, gpus))
        changed[rank] = (current + free, ends)
        return ends

    taken = core.gpus - sum(count for _, count in choice.holds)
    for victim in choice.victims:
        lease = victim.lease
        ends = add(victim.rank, 0)
        if (item := (max(now, lease.estimated_end), lease.gpus)) in ends:
            ends.remove(item)
        used = min(lease.gpus, max(0, taken))
        taken -= used
        add(victim.rank, lease.gpus - used, core.end if used else None, used)
    for rank, count in choice.holds:
        add(rank, -count, core.end, count)
    return changed


def drain_delay(holes: HoleTimes, card_type: str, gpus: int, changed: Mapping[int, NodeState],
                backlog: int | None = None) -> float:
    """Seconds: how much later the changed nodes can next hold `gpus` GPUs, summed over those it delays (a node
    emptied sooner counts nothing; nor does one too small for it) — or, given a `backlog` k, how much later the k-th
    hole that wide opens over the card type's nodes. Over the whole card type for a holder that spans nodes."""
    pool = holes.fleet.pools.get(card_type)
    if pool is None:
        return 0.0
    if gpus > pool.max_node_gpus:
        before, after = holes.opens_on_pool(card_type, gpus), holes.opens_on_pool(card_type, gpus, dict(changed))
        return 0.0 if NEVER in (before, after) else after - before
    if backlog is not None:
        before, after = holes.kth_opening(card_type, gpus, backlog), holes.kth_opening(card_type, gpus, backlog, changed)
        return 0.0 if NEVER in (before, after) else after - before
    delay = 0.0
    for rank, (free, ends) in changed.items():
        before, after = holes.opens_on(rank, gpus), holes.opens_on(rank, gpus, free, ends)
        if NEVER not in (before, after) and after > before:
            delay += after - before
    return delay


def _yielding_tasks(choice: VictimChoice, widths: Mapping[str, int]) -> list[tuple[int, Victim]]:
    """(width, first yielding lease) of each task among the choice's yielding victims."""
    tasks: dict[str, tuple[int, Victim]] = {}
    for victim in choice.victims:
        task_id = victim.lease.task_id
        if victim.standard == YIELDING and task_id not in tasks:
            tasks[task_id] = (widths.get(task_id, victim.lease.gpus), victim)
    return list(tasks.values())
