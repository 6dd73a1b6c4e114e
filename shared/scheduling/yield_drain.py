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
    """The task whose drain a yield may lengthen: its GPUs and the card types it may run on."""

    gpus: int
    card_types: frozenset[str]


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
    restarts = 0.0
    for width, victim in _yielding_tasks(choice, widths):
        restarts += width * holes.wait(core.card_type, width, excluding=victim.rank)
    return saved > restarts + drain_cost(holes, choice, core, holder, widths)


def drain_cost(holes: HoleTimes, choice: VictimChoice, core: CoreTake, holder: DrainHolder | None,
               widths: Mapping[str, int]) -> float:
    """GPU-seconds: the holder's GPUs × `drain_delay` (0 without a holder on the core task's card type)."""
    if holder is None or core.card_type not in holder.card_types:
        return 0.0
    changed = nodes_after_yield(holes, choice, core, widths)
    return holder.gpus * max(0.0, drain_delay(holes, core.card_type, holder.gpus, changed))


def nodes_after_yield(holes: HoleTimes, choice: VictimChoice, core: CoreTake,
                      widths: Mapping[str, int]) -> dict[int, NodeState]:
    """The free GPUs and ends of the nodes the yield touches, as they would be after it (module docstring)."""
    now, changed = holes.now, {}

    def node(rank: int) -> NodeState:
        if rank not in changed:
            changed[rank] = (holes.free[rank], list(holes.ends.get(rank, ())))
        return changed[rank]

    def add(rank: int, free: int, end: float | None = None, gpus: int = 0) -> None:
        current, ends = node(rank)
        if end is not None:
            ends.append((end, gpus))
        changed[rank] = (current + free, ends)

    taken = core.gpus - sum(count for _, count in choice.holds)
    for victim in choice.victims:  # as `CyclePreemption._release_victims` counts them
        lease = victim.lease
        _, ends = node(victim.rank)
        if (item := (max(now, lease.estimated_end), lease.gpus)) in ends:
            ends.remove(item)
        used = min(lease.gpus, max(0, taken))
        taken -= used
        add(victim.rank, lease.gpus - used, core.end if used else None, used)
    for rank, count in choice.holds:
        add(rank, -count, core.end, count)
    for width, victim in _yielding_tasks(choice, widths):
        # a task of one lease; one spanning nodes restarts wherever a hole that wide opens: not counted
        restart = holes.restart_node(core.card_type, width, excluding=victim.rank) if width == victim.lease.gpus else None
        if restart is not None:
            where, at = restart
            add(where, -width, at + max(0.0, victim.lease.estimated_end - now), width)
    return changed


def drain_delay(holes: HoleTimes, card_type: str, gpus: int, changed: Mapping[int, NodeState]) -> float:
    """Seconds: how much later the changed nodes can next hold `gpus` GPUs, summed over those it delays (a node
    emptied sooner counts nothing; nor does one too small for it). Over the whole card type for a holder that spans
    nodes."""
    pool = holes.fleet.pools.get(card_type)
    if pool is None:
        return 0.0
    if gpus > pool.max_node_gpus:
        before, after = holes.opens_on_pool(card_type, gpus), holes.opens_on_pool(card_type, gpus, dict(changed))
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
