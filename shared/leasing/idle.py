"""Idle reclaim: a lease whose GPUs sit idle is taken back, and idle GPU-time is counted (pure).

The policy's `idle_reclaim` section, as `IdleRule`. On every accepted heartbeat, each lease it
renews is `observe`d with the mean utilisation the agent reports for the lease's GPUs:

- **counting**: the time since the lease's previous heartbeat counts as idle GPU-seconds
  (`gpus x seconds`) when the mean is under the threshold — measured between the times the two
  heartbeats reached `cf:reports` (Redis's clock), so heartbeats read late, or several in one batch,
  still each stand for the time they cover; the sum travels in the next
  `lease.renewed` (and the rest in `lease.released`), so the ledger records idle GPU-hours per task
  and project. So does the mean utilisation over the heartbeats a `lease.renewed` stands for;
- **reclaiming**: once the start-up grace after the grant is over, the first idle heartbeat starts
  an idle run (`idle_since`), a busy one ends it; a run as long as the window makes the lease due
  (`due_for_reclaim`): the fold revokes it with `reclaimed_idle` (the agent checkpoints first), its
  task is requeued `reclaimed_idle` from that checkpoint, and its GPUs go back to the queue.
- **repeated reclaims**: the task counts them; at `hold_after` the requeue becomes a hold for a
  person (`DeferralReason.REPEATEDLY_IDLE`), since running it again would idle again (`held_after_reclaim`).

A heartbeat that reports no utilisation for a lease's GPUs changes nothing (an NVML hiccup is not
idleness).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.leasing.records import LeaseRecord


@dataclass(frozen=True, slots=True)
class IdleRule:
    enabled: bool = False
    threshold_pct: float = 5.0
    window_s: float = 600.0
    grace_s: float = 300.0
    hold_after: int = 2


def lease_utilisation(lease: LeaseRecord, readings: Iterable[tuple[int, float]]) -> float | None:
    """The mean utilisation of the lease's GPUs among (gpu index, util %) readings; None if none of them reported."""
    mine = [util for index, util in readings if index in lease.gpu_indices]
    return sum(mine) / len(mine) if mine else None


def observe(lease: LeaseRecord, util_pct: float | None, now: datetime, rule: IdleRule,
            heard_at: datetime | None = None) -> LeaseRecord:
    """The lease after a heartbeat that reported `util_pct` for its GPUs (see the module docstring);
    `heard_at`: when the heartbeat reached `cf:reports`, no later than now (default: now)."""
    if util_pct is None:
        return lease
    idle = util_pct < rule.threshold_pct
    idle_s = len(lease.gpu_indices) * max(0.0, ((heard_at or now) - lease.last_heard).total_seconds()) if idle else 0.0
    counting = now >= lease.granted_at + timedelta(seconds=rule.grace_s)
    idle_since = (lease.idle_since or now) if idle and counting else None
    return replace(lease, util_pct_sum=lease.util_pct_sum + util_pct, util_readings=lease.util_readings + 1,
                   idle_gpu_seconds=lease.idle_gpu_seconds + idle_s, idle_since=idle_since)


def due_for_reclaim(lease: LeaseRecord, now: datetime, rule: IdleRule) -> bool:
    """True when reclaim is on and the lease has been idle for the whole window."""
    return (rule.enabled and lease.active and lease.idle_since is not None
            and now - lease.idle_since >= timedelta(seconds=rule.window_s))


def reclaim_detail(lease: LeaseRecord, now: datetime, rule: IdleRule) -> str:
    idle_for = (now - lease.idle_since).total_seconds() if lease.idle_since else 0.0
    return (f"its GPUs ({', '.join(map(str, lease.gpu_indices))} on {lease.node_id}) stayed under "
            f"{rule.threshold_pct:g}% utilisation for {idle_for:.0f} s (window {rule.window_s:g} s)")


def held_after_reclaim(reclaims: int, rule: IdleRule) -> bool:
    """True once a task was reclaimed `hold_after` times: a person should look before it runs again."""
    return reclaims >= rule.hold_after


def held_detail(reclaims: int) -> str:
    return (f"reclaimed {reclaims} times for idle GPUs; held for a person to look at it "
            "(release it when fixed, or cancel it)")
