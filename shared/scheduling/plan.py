"""`plan(snapshot, queue, policy, now) -> Plan`: one scheduling cycle, as a pure function.

Pure: no I/O, no clock, no randomness — `now` is a parameter, the inputs are never modified, and the
result does not depend on the order of the queue or of the snapshot's nodes. The live dispatcher and
the simulator both call exactly this function. See docs/scheduling.md for the algorithm and reasons.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from shared.scheduling.consolidation import consolidate
from shared.scheduling.cycle import Cycle
from shared.scheduling.model import Plan, QueuedTask, Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordering import walk_order


def plan(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy, now: float) -> Plan:
    """Decide one cycle: which queued tasks start where, what is preempted, reserved or deferred.

    Every queued task appears exactly once: in `grants`, or in `deferrals` with a reason (the task
    holding the reservation has a Reservation and a RESERVED deferral). Task ids must be unique.
    """
    with _cyclic_gc_paused():
        # 1. Order the queue: priority class, priority aged by waiting time, submit time, id.
        #    A queue kept sorted between cycles (`OrderedQueue`) is not sorted again, and gives the walk
        #    columns that let it defer a task like an earlier one without reading the task.
        ordered, columns = walk_order(queue, policy, now)
        # 2. Index free GPUs by card type and free count (headroom where core work holds or waits for
        #    GPUs); open the cycle's quota book. A snapshot kept between cycles (`KeptSnapshot`) gives the
        #    nodes' ranks and its leases grouped by card type and class instead of every lease read again.
        cycle = Cycle(snapshot, policy, now, ordered, columns)
        # 3. Walk the queue: eligibility, quota, then per card option headroom, reservation and
        #    best-fit placement; a task that fits nowhere preempts (core), reserves (the first such
        #    task), blocks (strict-order baselines) or is deferred with the most telling reason.
        #    4. Once nothing can start any more, the rest is deferred cheaply.
        cycle.walk(ordered, columns)
        # 5. The plan: grants and deferrals in queue order, with preemptions and the reservation.
        decided = cycle.to_plan()
        # 6. With `policy.holder_consolidates`, the reservation's holder may take a node whose work moves now.
        if policy.holder_consolidates:
            decided = consolidate(snapshot, ordered, decided, policy, now)
        del cycle, ordered, columns  # freed before the collector runs again (`_cyclic_gc_paused`)
    return decided


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while planning.

    A plan allocates one object per queued task; with a large snapshot and queue alive, the
    collector would otherwise traverse the whole heap several times per call (measured: +50-70% on
    the scale benchmark). plan() creates no reference cycles, so reference counting frees all of
    its garbage anyway; the collector is re-enabled (if it was on) before returning. The caller frees
    the cycle's working state first: re-enabled, the collector soon traverses every container allocated
    since it last ran, and the cycle's (its index, lease scan, victim index) would be among them.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
