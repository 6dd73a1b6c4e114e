"""Lease and node events the dispatcher writes: grants, renewals, expiry, revocation, the fleet."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from shared.events.dispatch import LeaseRelease, QueueEntry
from shared.events.envelope import Envelope, Payload
from shared.events.reasons import NodeMode, RevokeReason, StartReason
from shared.events.values import Detail, EntityId, FencingToken, GpuIndices, NonNegative, Positive


class LeaseGrantedData(Payload):
    lease_id: EntityId
    task_id: EntityId
    agent_id: EntityId
    node_id: EntityId
    card_type: EntityId
    gpu_indices: GpuIndices
    fencing_token: FencingToken
    ttl_s: Positive = Field(description="the lease expires unless renewed within this many seconds")
    expires_at: AwareDatetime
    resume_from: str | None = Field(None, description="checkpoint to resume from; None = fresh start")
    parts: int = Field(1, ge=1, description="leases the grant spans (one per node); 1 = single node")
    policy_version: int | None = Field(
        None, ge=1, description="version of the `policy` document the grant was planned with (None: the dispatcher's"
        " env preset, before the config service seeded the document)",
    )
    start_reason: StartReason | None = Field(
        None, description="why the task started now: in_order, backfill (earlier tasks still wait), reservation (the"
        " GPUs were kept for it), preemption (opportunistic work yielded them)",
    )
    passed: int = Field(0, ge=0, description="tasks earlier in the queue order still waiting for GPUs when it started")
    borrowed_headroom: bool = Field(
        False, description="a standard filler: the grant took GPUs of the burst headroom kept for core work, and"
        " yields them to core work at once (false: it took none, or an event written before this field)",
    )
    time_scale: float = Field(
        1.0, gt=0, description="the node's clock speed as its agent registered it: a simulated agent runs this many"
        " times faster than the wall clock (1: a real agent)",
    )
    queued: QueueEntry | None = Field(
        None, description="the task's entry into the queue, carried here when it was granted GPUs in the cycle that"
        " first found it eligible: it entered the queue at this event's time and no `task.queued` was written (None:"
        " one was; of a grant spanning several nodes only the first lease's event carries it)",
    )


class LeaseGranted(Envelope):
    """GPUs of one node were leased to a task."""

    type: Literal["lease.granted"] = "lease.granted"
    data: LeaseGrantedData


class LeaseRenewedData(Payload):
    lease_id: EntityId
    task_id: EntityId
    until: AwareDatetime = Field(description="the lease now expires at this time unless renewed again")
    heard_at: AwareDatetime | None = Field(
        None, description="when the latest heartbeat it stands for reached cf:reports (Redis's clock): the lease"
        " was held until then, however late the dispatcher applied it; the ledger accounts the lease up to this"
        " time (None in events written before the field existed: their occurred_at)",
    )
    heartbeats: int = Field(1, ge=1, description="heartbeats this one event coalesces")
    gpu_util_pct: float | None = Field(
        None, ge=0, le=100, description="mean utilisation of the lease's GPUs over those heartbeats (None: not reported)"
    )
    idle_gpu_seconds: NonNegative = Field(
        0.0, description="GPU-seconds since the previous lease.renewed under the policy's idle threshold"
    )


class LeaseRenewed(Envelope):
    """Heartbeats renewed a lease (coalesced: one event stands for several heartbeats).

    Schema v2; v1 called `until` `expires_at` (see `shared.events.upcasters`).
    """

    type: Literal["lease.renewed"] = "lease.renewed"
    schema_version: int = 2
    data: LeaseRenewedData


class LeaseExpiredData(Payload):
    lease_id: EntityId
    task_id: EntityId
    last_renewed_at: AwareDatetime | None = Field(None, description="the last renewal; None if never")


class LeaseExpired(Envelope):
    """A lease was not renewed within its TTL; its GPUs are free and its task is requeued."""

    type: Literal["lease.expired"] = "lease.expired"
    data: LeaseExpiredData


class LeaseRevokedData(Payload):
    lease_id: EntityId
    task_id: EntityId
    reason: RevokeReason
    detail: Detail = ""


class LeaseRevoked(Envelope):
    """The dispatcher took a lease back before its task ended."""

    type: Literal["lease.revoked"] = "lease.revoked"
    data: LeaseRevokedData


class LeaseReleasedData(LeaseRelease):
    lease_id: EntityId
    task_id: EntityId


class LeaseReleased(Envelope):
    """A lease ended and its GPUs are free; once for every lease, whatever ended it — as an event of its own,
    or carried by the `task.succeeded` / `task.failed` of the report that ended it (`TaskSucceededData.released`).

    The ledger charges `granted_at`..`ended_at`; audits check no GPU is in two overlapping leases.
    """

    type: Literal["lease.released"] = "lease.released"
    data: LeaseReleasedData


class NodeRegisteredData(Payload):
    node_id: EntityId
    agent_id: EntityId
    card_type: EntityId
    gpus: int = Field(ge=1, description="number of GPUs on the node")
    mode: NodeMode


class NodeRegistered(Envelope):
    """An agent registered a node and its GPUs (again, after a restart: same node_id)."""

    type: Literal["node.registered"] = "node.registered"
    data: NodeRegisteredData


class NodeLostData(Payload):
    node_id: EntityId
    agent_id: EntityId
    detail: Detail = ""
    lease_ids: tuple[EntityId, ...] = Field((), description="leases that were in force on the node")


class NodeLost(Envelope):
    """A node stopped heartbeating; its leases expire or are revoked."""

    type: Literal["node.lost"] = "node.lost"
    data: NodeLostData
