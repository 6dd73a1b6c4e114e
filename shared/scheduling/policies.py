"""Named scheduling policies: cardflow and the baselines it is measured against.

- "cardflow": everything on — class/priority/aging order, readiness gate, headroom for core work,
  EASY reservation + backfill, opportunistic work filling the reservation's drain (and yielding when it
  is due — to a standard holder only if the headroom then lets it start), preemption of opportunistic
  work, standard work that checkpoints filling the headroom where no ready opportunistic work would borrow
  it (and yielding it to core work at once), heavy-task spreading, quota expiry.
- "fifo": strict submit order; the first task that does not fit blocks everything behind it.
- "priority": strict (class, priority) order with head-of-line blocking, no backfill.
- "easy-backfill": Slurm-style EASY backfill over priority order, the estimate as time limit.

The baselines are readiness-blind (they start a task whose data is not ready; it then holds its GPUs
idle), keep no headroom, never preempt (so opportunistic work never fills a reservation), do not spread heavy tasks and do not look at quota expiry
dates (a quota's remaining amount is still respected, as Slurm enforces association limits).
"""

from __future__ import annotations

from shared.scheduling.policy_knobs import Policy

NO_HEAVY_LIMIT = 1 << 30  # baselines do not spread memory/bandwidth-heavy tasks

_BASELINE = dict(
    aging_per_hour=0.0,
    headroom=0.0,
    max_heavy_per_node=NO_HEAVY_LIMIT,
    readiness_gate=False,
    preemption=False,
    fill_reservations=False,
    quota_expiry_gate=False,
    holder_reclaims_within_headroom=False,  # inert without filling; False keeps their runs' cache keys (bench/)
    checkpointing_standard_borrows=False,  # inert without headroom and preemption; False keeps their cache keys
    fillers_yield_at_once=False,
    fillers_after_opportunistic=False,
)

POLICIES: dict[str, Policy] = {
    "cardflow": Policy(name="cardflow"),
    "fifo": Policy(name="fifo", order="fifo", backfill=False, head_of_line_blocking=True, **_BASELINE),
    "priority": Policy(name="priority", order="priority", backfill=False, head_of_line_blocking=True, **_BASELINE),
    "easy-backfill": Policy(name="easy-backfill", order="priority", backfill=True, **_BASELINE),
}


def get_policy(name: str) -> Policy:
    """The preset called `name`; a clear error listing the known names otherwise."""
    try:
        return POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
