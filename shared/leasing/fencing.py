"""Fencing: may this agent report about this lease? A pure check, applied to EVERY lease report.

A report is accepted only when the lease exists, is still active, is held by the reporting agent,
is about the lease's task, and carries exactly the lease's fencing token. Anything else is
rejected with a reason, recorded in `rejected_reports`, logged, and never applied: a report from
before an expiry (older token), from an agent that restarted, or from a mistaken agent cannot
move a task that has since been leased again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.leasing.records import LeaseRecord


class Rejection(StrEnum):
    """Why a report about a lease was refused."""

    UNKNOWN_LEASE = "unknown_lease"  # no such lease was ever granted
    LEASE_ENDED = "lease_ended"  # the lease expired, was released or revoked and ended
    WRONG_AGENT = "wrong_agent"  # another agent holds the lease
    WRONG_TASK = "wrong_task"  # the lease is for another task
    STALE_TOKEN = "stale_token"  # the token is not the lease's (older grant, or forged)
    UNKNOWN_NODE = "unknown_node"  # a heartbeat from a node that never registered
    RATE_LIMITED = "rate_limited"  # too soon after the lease's last accepted report of its kind (screening.rate_cap)
    OUTPUT_OUT_OF_BOUNDS = "output_out_of_bounds"  # a progress report's output claim beyond the policy (plausibility)


@dataclass(frozen=True, slots=True)
class LeaseClaim:
    """What a report says about a lease."""

    agent_id: str
    lease_id: str
    task_id: str
    fencing_token: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a report is not applied: the machine reason and a sentence."""

    reason: Rejection
    detail: str


def check_claim(claim: LeaseClaim, lease: LeaseRecord | None) -> Refusal | None:
    """None if the report may be applied; else why not, in a sentence."""
    if lease is None:
        return Refusal(Rejection.UNKNOWN_LEASE, f"lease {claim.lease_id} does not exist")
    if lease.agent_id != claim.agent_id:
        return Refusal(
            Rejection.WRONG_AGENT, f"lease {claim.lease_id} is held by agent {lease.agent_id}, not {claim.agent_id}"
        )
    if lease.fencing_token != claim.fencing_token:
        return Refusal(
            Rejection.STALE_TOKEN,
            f"lease {claim.lease_id} has fencing token {lease.fencing_token}; the report carries {claim.fencing_token}",
        )
    if lease.task_id != claim.task_id:
        return Refusal(Rejection.WRONG_TASK, f"lease {claim.lease_id} is for task {lease.task_id}, not {claim.task_id}")
    if not lease.active:
        return Refusal(Rejection.LEASE_ENDED, f"lease {claim.lease_id} has already ended")
    return None
