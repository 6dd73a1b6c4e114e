"""Which lease claims of agent reports are applied: fencing first, then each further screen in order.

A screen is a pure function `(claim, report, lease, node, now, rules) -> Refusal | None` over a
lease that passed fencing (`node` is the lease's node, None if unknown); the first refusal wins. A
new rule about reports is one more function in `SCREENS`, with its own `Rejection` value and table
tests; `apply_reports` needs no change. The screens:

- `rate_cap`: per lease, checkpoint and progress reports may come one per the policy's gap
  (`ReportLimits`, in the agent's time: real seconds x the node's registered time scale), plus a
  burst of `burst` early ones; a report beyond that is refused `rate_limited` (the run's next
  report carries the newer state anyway). A checkpoint the dispatcher asked for (the lease is being
  preempted or revoked) is never capped. So a misbehaving agent (the issue's
  `checkpoint.interval_minutes: 1e-300` storm: 100,000 checkpoints per lease) costs the dispatcher
  one refused claim per report, never an event or a saved checkpoint; `report_fold` records such
  refusals as one row per lease and batch. `admit` says when the next report is due (`*_due_at`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from shared.events.reports import AgentReport, TaskCheckpointed, TaskProgress
from shared.leasing.fencing import LeaseClaim, Refusal, Rejection, check_claim
from shared.leasing.records import LeaseRecord, NodeRecord
from shared.leasing.work import LeaseRules

Screen = Callable[[LeaseClaim, AgentReport, LeaseRecord, NodeRecord | None, datetime, LeaseRules], Refusal | None]


def capped_gap(report: AgentReport, lease: LeaseRecord, node: NodeRecord | None,
               rules: LeaseRules) -> tuple[str, datetime | None, timedelta] | None:
    """(kind, when the next one is due, real gap) for a report the rate cap applies to; None otherwise."""
    if isinstance(report, TaskCheckpointed):
        if lease.preempting or lease.revoke_reason is not None:
            return None  # the checkpoint the dispatcher asked for
        kind, due, gap_s = "checkpoint", lease.checkpoint_due_at, rules.reports.min_checkpoint_gap_s
    elif isinstance(report, TaskProgress):
        kind, due, gap_s = "progress report", lease.progress_due_at, rules.reports.min_progress_gap_s
    else:
        return None
    if gap_s <= 0:
        return None
    scale = node.time_scale if node is not None else 1.0
    return kind, due, timedelta(seconds=gap_s / scale)


def rate_cap(claim: LeaseClaim, report: AgentReport, lease: LeaseRecord, node: NodeRecord | None, now: datetime,
             rules: LeaseRules) -> Refusal | None:
    """Refuse a checkpoint / progress report beyond the lease's allowance (GCRA: one per gap, `burst` early)."""
    capped = capped_gap(report, lease, node, rules)
    if capped is None:
        return None
    kind, due, gap = capped
    if due is None or due - now <= gap * rules.reports.burst:
        return None
    scale = node.time_scale if node is not None else 1.0
    return Refusal(Rejection.RATE_LIMITED, f"lease {claim.lease_id} sent {kind}s faster than one per"
                   f" {gap.total_seconds() * scale:g} s of its agent's time (x{scale:g}) plus a burst of"
                   f" {rules.reports.burst}: the policy's reports section")


def admit(report: AgentReport, lease: LeaseRecord, node: NodeRecord | None, now: datetime,
          rules: LeaseRules) -> LeaseRecord:
    """The lease after an accepted report: its next report of that kind is due one gap later."""
    capped = capped_gap(report, lease, node, rules)
    if capped is None:
        return lease
    _, due, gap = capped
    after = max(due or now, now) + gap
    return replace(lease, checkpoint_due_at=after) if isinstance(report, TaskCheckpointed) else \
        replace(lease, progress_due_at=after)


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
