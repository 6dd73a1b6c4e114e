"""Which lease claims of agent reports are applied: fencing first, then each further screen in order.

A screen is a pure function `(claim, report, lease, node, now, rules) -> Refusal | None` over a
lease that passed fencing (`node` is the lease's node, None if unknown); the first refusal wins. A
new rule about reports is one more function in `SCREENS`, with its own `Rejection` value and table
tests; `apply_reports` needs no change. The screens:

- `rate_cap`: a checkpoint or progress report about a lease less than the policy's gap after the
  last accepted one (`ReportLimits`, in the agent's time: real seconds x the node's registered time
  scale) is refused `rate_limited`; the run's next report carries the newer state anyway. So a
  misbehaving agent (the issue's `checkpoint.interval_minutes: 1e-300` storm: 100,000 checkpoints
  per lease) costs the dispatcher one refused claim per report, never an event or a saved
  checkpoint; `report_fold` records such refusals as one row per lease, reason and batch.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shared.events.reports import AgentReport, TaskCheckpointed, TaskProgress
from shared.leasing.fencing import LeaseClaim, Refusal, Rejection, check_claim
from shared.leasing.records import LeaseRecord, NodeRecord
from shared.leasing.work import LeaseRules

Screen = Callable[[LeaseClaim, AgentReport, LeaseRecord, NodeRecord | None, datetime, LeaseRules], Refusal | None]


def rate_cap(claim: LeaseClaim, report: AgentReport, lease: LeaseRecord, node: NodeRecord | None, now: datetime,
             rules: LeaseRules) -> Refusal | None:
    """Refuse a checkpoint / progress report that comes sooner after the last accepted one than the policy allows."""
    if isinstance(report, TaskCheckpointed):
        kind, last, gap = "checkpoint", lease.last_checkpoint_at, rules.reports.min_checkpoint_gap_s
    elif isinstance(report, TaskProgress):
        kind, last, gap = "progress report", lease.last_progress_at, rules.reports.min_progress_gap_s
    else:
        return None
    if last is None or gap <= 0:
        return None
    scale = node.time_scale if node is not None else 1.0
    since = (now - last).total_seconds() * scale
    if since >= gap:
        return None
    return Refusal(Rejection.RATE_LIMITED, f"a {kind} of lease {claim.lease_id} {since:.3g} s (agent time, x{scale:g})"
                   f" after the last accepted one; the policy's reports section allows one per {gap:g} s")


SCREENS: tuple[Screen, ...] = (rate_cap,)
"""Rules applied after fencing, in order."""


def screen_claim(claim: LeaseClaim, report: AgentReport, lease: LeaseRecord | None, node: NodeRecord | None,
                 now: datetime, rules: LeaseRules) -> Refusal | None:
    """None if the claim may be applied; else the first refusal (fencing, then `SCREENS`)."""
    refusal = check_claim(claim, lease)
    if refusal is not None or lease is None:
        return refusal
    for screen in SCREENS:
        refusal = screen(claim, report, lease, node, now, rules)
        if refusal is not None:
            return refusal
    return None
