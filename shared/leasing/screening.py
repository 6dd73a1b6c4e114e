"""Which lease claims of agent reports are applied: fencing first, then each further screen in order.

A screen is a pure function `(claim, report, lease, now, rules) -> Refusal | None` over a lease
that passed fencing; the first refusal wins. A new rule about reports (a rate cap per lease, a
success that comes implausibly early, ...) is one more function in `SCREENS`, with its own
`Rejection` value and table tests; `apply_reports` needs no change.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shared.events.reports import AgentReport
from shared.leasing.fencing import LeaseClaim, Refusal, check_claim
from shared.leasing.records import LeaseRecord
from shared.leasing.work import LeaseRules

Screen = Callable[[LeaseClaim, AgentReport, LeaseRecord, datetime, LeaseRules], Refusal | None]

SCREENS: tuple[Screen, ...] = ()
"""Rules applied after fencing, in order."""


def screen_claim(claim: LeaseClaim, report: AgentReport, lease: LeaseRecord | None, now: datetime,
                 rules: LeaseRules) -> Refusal | None:
    """None if the claim may be applied; else the first refusal (fencing, then `SCREENS`)."""
    refusal = check_claim(claim, lease)
    if refusal is not None or lease is None:
        return refusal
    for screen in SCREENS:
        refusal = screen(claim, report, lease, now, rules)
        if refusal is not None:
            return refusal
    return None
