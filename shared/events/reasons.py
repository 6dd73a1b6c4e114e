"""Machine reasons carried by events, commands and reports: one `StrEnum` per decision.

Each reason travels with a human sentence (`detail`) that the console and `audit why` print
verbatim. Why a task waits (`task.held`) is the scheduling core's `DeferralReason`
(`shared.scheduling.model`), the same enum `plan()` returns, so a deferral is published as it is.
"""

from __future__ import annotations

from enum import StrEnum


class UnmatchableReason(StrEnum):
    """Why no card type can run a task (`task.unmatchable`): none in the catalog, or none in the live fleet."""

    NO_ALLOWED_CARD_TYPE = "no_allowed_card_type"  # allow/deny leave no catalog card type
    INSUFFICIENT_VRAM = "insufficient_vram"  # no allowed card type of the catalog / fleet has min_vram_gb per GPU
    TOO_MANY_GPUS = "too_many_gpus"  # more GPUs than the fleet has of every allowed type
    EMPTY_CATALOG = "empty_catalog"  # the card catalog lists no card types at all
    NO_FLEET = "no_fleet"  # no GPU node has registered yet; matched again on the first registration


class RequeueReason(StrEnum):
    """Why a task that held a lease goes back to the queue (`task.requeued`)."""

    PREEMPTED = "preempted"  # core work needed the GPUs; the task checkpointed and yielded
    LEASE_EXPIRED = "lease_expired"  # the agent stopped renewing within the lease TTL
    RECLAIMED_IDLE = "reclaimed_idle"  # its GPUs stayed under the idle threshold too long
    AGENT_FAILED = "agent_failed"  # the agent reported it could not run or keep running the task
    OPERATOR_REQUEUE = "operator_requeue"  # an operator requeued it (`cardflow requeue`; not `operator`, a hold)


class RevokeReason(StrEnum):
    """Why the dispatcher takes a lease back before the task ends (`lease.revoked`)."""

    PREEMPTED = "preempted"  # the GPUs go to higher-class work
    RECLAIMED_IDLE = "reclaimed_idle"  # the GPUs sat idle under the lease
    CANCELLED = "cancelled"  # the task was cancelled
    NODE_LOST = "node_lost"  # the node stopped heartbeating
    SUPERSEDED = "superseded"  # a newer fencing token exists for the same GPUs
    OPERATOR = "operator"  # an operator revoked the lease


class ReleaseReason(StrEnum):
    """Why a lease ended (`lease.released`); every lease ends exactly once with one of these."""

    SUCCEEDED = "succeeded"  # the task finished with exit code 0
    FAILED = "failed"  # the task finished with an error
    PREEMPTED = "preempted"  # the task checkpointed and yielded its GPUs to higher-class work
    EXPIRED = "expired"  # the agent did not renew the lease within its TTL
    REVOKED = "revoked"  # the dispatcher took the lease back (node lost, agent restart, superseded, operator)
    CANCELLED = "cancelled"  # the task was cancelled while it held the lease
    RECLAIMED_IDLE = "reclaimed_idle"  # its GPUs stayed idle too long and were taken back


class SuccessFlag(StrEnum):
    """Why a success an agent reported is not taken at its word (`task.succeeded.flags`; `shared.leasing.plausibility`)."""

    IMPLAUSIBLY_EARLY_SUCCESS = "implausibly_early_success"  # it ran less than the policy's share of its estimate
    OUTPUT_OUT_OF_BOUNDS = "output_out_of_bounds"  # it claimed more output than the policy allows; not recorded


class StartReason(StrEnum):
    """Why a task started when it did (`lease.granted`), so queue-jumping is visible."""

    IN_ORDER = "in_order"  # no task earlier in the queue order was waiting for GPUs
    BACKFILL = "backfill"  # earlier tasks still wait: it fits where they do not, or ends before the reservation
    RESERVATION = "reservation"  # it held the reservation: the GPUs were kept free for it
    PREEMPTION = "preemption"  # opportunistic work checkpointed and yielded the GPUs to it


class NodeMode(StrEnum):
    """How an agent runs tasks."""

    REAL = "real"  # real GPUs discovered via NVML; tasks are subprocesses
    SIM = "sim"  # simulated GPUs; tasks "run" for their estimated duration at a time scale
