"""The dispatcher's knobs (`CARDFLOW_DISPATCHER_*` environment variables), with their defaults."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.leasing.work import LeaseRules
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.policies import get_policy


class DispatcherConfig(BaseSettings):
    """Timings and policy of one dispatcher process. Tests pass their own instance to `make_spec`."""

    model_config = SettingsConfigDict(env_prefix="CARDFLOW_DISPATCHER_", env_file=None, extra="ignore", frozen=True)

    policy: str = Field("cardflow", description="scheduling policy preset (shared.scheduling.policies)")
    lease_ttl_s: float = Field(30.0, gt=0, description="a lease expires unless renewed within this")
    renewal_event_every_s: float = Field(5.0, ge=0, description="at most one lease.renewed per lease per this")
    node_lost_after_s: float = Field(60.0, gt=0, description="a node silent this long is lost")
    tick_s: float = Field(1.0, gt=0, description="cycle + expiry sweep at least this often")
    debounce_s: float = Field(
        0.1, ge=0, description="after a cycle that had a queue, the next event-driven cycle waits until this has passed"
        " since its start (a burst of events lands in one cycle); after a cycle with an empty queue it runs at once"
    )
    capacity_reason_every_s: float = Field(
        10.0, ge=0, description="a queued task's capacity reason (no capacity, headroom, reservation) is stored and"
        " published (`task.held`) only once its row has not changed for this long: a busy queue's reasons flip"
        " between cycles, and most tasks start before any of them would mean anything",
    )
    preempt_after_s: float | None = Field(
        None, ge=0, description="a core task preempts opportunistic work only after waiting this long since its"
        " submission (None: the policy preset's, 600 s for cardflow)",
    )
    preempt_max_lost_gpu_hours: float | None = Field(
        None, ge=0, description="never preempt a lease that would lose more GPU-hours of work than this (None: the"
        " policy preset's; cardflow: no more than the lease's own checkpoint write)",
    )
    fill_reservations: bool | None = Field(
        None, description="opportunistic work that checkpoints may run on GPUs a reservation waits for and is"
        " preempted when the reservation is due (None: the policy preset's, on for cardflow)",
    )
    estimate_every_s: float = Field(
        5.0, ge=0, description="estimate the queue's starts and run the watches (deadlines, quotas, approvals) at most"
        " this often (dispatcher.queue_estimates)",
    )
    estimate_limit: int = Field(500, ge=1, description="estimate the starts of at most this many tasks of the queue")
    preempt_grace_s: float = Field(60.0, ge=0, description="time an agent gets to checkpoint and yield")
    revoke_grace_s: float = Field(30.0, ge=0, description="time an agent gets to stop a revoked task")
    leader_poll_s: float = Field(0.5, gt=0, description="how often a standby tries the leader lock")
    batch_size: int = Field(500, ge=1, description="stream entries per batch read")
    report_linger_ms: int = Field(
        100, ge=0, description="after a batch of agent reports smaller than batch_size, wait this long before reading"
        " the next: 50 agents heartbeating every 2 s were 25 write steps a second, each holding the write lock"
        " (a transaction) that a new task's facets and the cycle granting it wait for",
    )
    min_idle_ms: int = Field(30_000, ge=1, description="pending entries older than this are claimed")
    steps_in_flight: int = Field(
        2, ge=1, le=4, description="write steps decided and not yet committed: 1, a step commits before the next"
        " decides; 2 or more, the next step decides while the previous ones write and commit (they commit in"
        " order). docs/BENCHMARKS.md session 18: 2 lowers submit->lease p50/p99 by ~20% at 250/s offered in six"
        " alternating pairs, no difference at 500 and 1,000/s, the same CPU per task",
    )

    def lease_rules(self) -> LeaseRules:
        """The timings the pure folds apply."""
        return LeaseRules(
            lease_ttl_s=self.lease_ttl_s, renewal_event_every_s=self.renewal_event_every_s,
            revoke_grace_s=self.revoke_grace_s, preempt_grace_s=self.preempt_grace_s,
            node_lost_after_s=self.node_lost_after_s, capacity_reason_every_s=self.capacity_reason_every_s,
            claim_after_s=self.min_idle_ms / 1000,
        )

    def policy_overrides(self) -> dict[str, Any]:
        """The `Policy` fields the environment overrides (those set, by `Policy` field name)."""
        knobs = {
            "preempt_after_s": self.preempt_after_s,
            "preempt_max_lost_gpu_hours": self.preempt_max_lost_gpu_hours,
            "fill_reservations": self.fill_reservations,
        }
        return {name: value for name, value in knobs.items() if value is not None}

    def policy_in_force(self) -> Policy:
        """The preset with the overrides: what the dispatcher plans with until a policy document exists
        (the config service seeds version 1 of `policy` from exactly this)."""
        return replace(get_policy(self.policy), **self.policy_overrides())
