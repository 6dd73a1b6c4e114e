"""Why each grant of a cycle started when it did, so queue-jumping is visible (pure).

    reasons = start_reasons(decided, ordered, flags_of)    # {task_id: (StartReason, passed)}

`ordered` is the cycle's queue in `plan()`'s order. For a granted task, `passed` counts the tasks
before it in that order that the plan left waiting for GPUs (deferred for capacity: no room, the
headroom, a reservation, ...; not those waiting for data, a match, approval or quota). Its reason:

- `preemption` — the plan had preempted opportunistic work for it (flag `preempted_for`);
- `reservation` — it held the cycle's reservation before (flag `reserved`): the GPUs were kept for it;
- `backfill` — earlier tasks still wait (`passed > 0`): it fits where they do not, or ends before
  the reserved task starts;
- `in_order` — nothing earlier waits.

`reservation_flags` says which tasks now hold the reservation (their flag is set) and which no
longer do (cleared), so the reason stays right when the holder changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shared.events.reasons import StartReason
from shared.scheduling.model import Plan, QueuedTask, WaitKind

RESERVED_FLAG = "reserved"
PREEMPTED_FOR_FLAG = "preempted_for"


def start_reasons(decided: Plan, ordered: Sequence[QueuedTask],
                  flags_of: Callable[[str], frozenset[str]]) -> dict[str, tuple[StartReason, int]]:
    """Each granted task's reason and how many waiting tasks it passed (see the module docstring)."""
    granted = {grant.task_id for grant in decided.grants}
    if not granted:
        return {}
    deferrals = decided.deferrals
    waiting = {task_id for task_id, reason in zip(deferrals.task_ids, deferrals.reasons)
               if reason.kind is WaitKind.CAPACITY}
    reasons, passed = {}, 0
    for task in ordered:
        if task.task_id in waiting:
            passed += 1
        elif task.task_id in granted:
            flags = flags_of(task.task_id)
            if PREEMPTED_FOR_FLAG in flags:
                reason = StartReason.PREEMPTION
            elif RESERVED_FLAG in flags:
                reason = StartReason.RESERVATION
            else:
                reason = StartReason.BACKFILL if passed else StartReason.IN_ORDER
            reasons[task.task_id] = (reason, passed)
    return reasons
