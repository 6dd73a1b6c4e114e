"""Messages between the dispatcher and agents: agent reports (`cf:reports`) and commands (inboxes).

These are NOT events of `cf:events`: reports are observations and commands are instructions; the
dispatcher turns the reports it accepts into events. They share the event envelope, so the same
outbox, relay, consumer groups, inbox de-duplication and `parse_*` functions carry them:

- subject `agent/<agent_id>` for both (see `shared.events.subjects.agent_subject`);
- reports: `subject_seq` counts an agent process's reports from 1 (it restarts at 1 with every
  `report.registered`), producer `agent/<agent_id>`, actor `agent:<agent_id>`;
- commands: written through the dispatcher's outbox, so `subject_seq` is gap-free per agent.

Every report or command about a lease carries the lease's fencing token, so a stale or foreign
one is rejected. `AgentReport` and `AgentCommand` are discriminated unions on `type`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import AwareDatetime, Field

from shared.events.envelope import Envelope, Payload
from shared.events.reasons import NodeMode, RevokeReason
from shared.events.values import Detail, EntityId, FencingToken, Fraction, GpuIndices, NonNegative, Positive
from shared.submission import Command

# ---- reports: agent -> dispatcher (cf:reports) ---------------------------------------------


class GpuInfo(Payload):
    index: int = Field(ge=0)
    vram_gb: Positive
    uuid: str | None = None


class LeaseHeld(Payload):
    """A lease as the agent holding it sees it."""

    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    progress: Fraction | None = None


class GpuUtilisation(Payload):
    index: int = Field(ge=0)
    util_pct: float = Field(ge=0, le=100)
    memory_used_gb: NonNegative | None = None


class AgentRegisteredReport(Payload):
    agent_id: EntityId
    node_id: EntityId
    card_type: EntityId
    mode: NodeMode
    gpus: tuple[GpuInfo, ...] = Field(min_length=1)
    held_leases: tuple[LeaseHeld, ...] = Field((), description="leases still running across an agent restart")
    started_at: AwareDatetime | None = Field(
        None,
        description="when this agent process started: a lease granted before it and not in held_leases is lost; "
        "one granted after it may still be on its way to the agent (periodic re-registrations)",
    )
    time_scale: float = Field(
        1.0, gt=0, le=1_000_000,
        description="how many times faster than real time this agent's runs go (a simulated agent's --time-scale;"
        " 1 for real GPUs): report rate caps count in the agent's time",
    )


class AgentRegistered(Envelope):
    """An agent (re)started and announces its node and GPUs."""

    type: Literal["report.registered"] = "report.registered"
    data: AgentRegisteredReport


class HeartbeatReport(Payload):
    agent_id: EntityId
    node_id: EntityId
    leases: tuple[LeaseHeld, ...] = Field((), description="every lease the agent holds; each is renewed")
    gpus: tuple[GpuUtilisation, ...] = ()


class Heartbeat(Envelope):
    """Periodic: renews every lease listed and reports per-GPU utilisation."""

    type: Literal["report.heartbeat"] = "report.heartbeat"
    data: HeartbeatReport


class TaskProgressReport(Payload):
    agent_id: EntityId
    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    progress: Fraction | None = None
    output_units: NonNegative | None = Field(None, description="cumulative output of this run so far")
    message: Detail = ""


class TaskProgress(Envelope):
    """The task reported progress (and, optionally, output produced so far)."""

    type: Literal["report.progress"] = "report.progress"
    data: TaskProgressReport


class CheckpointReport(Payload):
    agent_id: EntityId
    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    checkpoint_uri: str = Field(min_length=1)
    checksum: str | None = None
    progress: Fraction | None = None


class TaskCheckpointed(Envelope):
    """The task wrote a checkpoint (the dispatcher records the `task.checkpointed` event)."""

    type: Literal["report.checkpointed"] = "report.checkpointed"
    data: CheckpointReport


class TaskFinishedReport(Payload):
    agent_id: EntityId
    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    exit_code: int | None = Field(description="None when the process was killed by a signal")
    output_units: NonNegative | None = Field(None, description="total output of the run")
    error: Detail | None = Field(None, description="last lines of stderr, or the agent's own error")


class TaskFinished(Envelope):
    """The task's process ended (the dispatcher decides succeeded / failed / requeued)."""

    type: Literal["report.finished"] = "report.finished"
    data: TaskFinishedReport


AgentReport = Annotated[
    Union[AgentRegistered, Heartbeat, TaskProgress, TaskCheckpointed, TaskFinished],
    Field(discriminator="type"),
]
"""Anything an agent appends to `cf:reports`."""


# ---- commands: dispatcher -> agent (cf:agent:<id>) -------------------------------------------


class LeaseGrantOrder(Payload):
    agent_id: EntityId
    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    gpu_indices: GpuIndices
    ttl_s: Positive
    expires_at: AwareDatetime
    command: Command | None = None
    env: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    resume_from: str | None = Field(None, description="checkpoint to resume from (CARDFLOW_RESUME_FROM)")
    checkpoint_interval_s: Positive | None = None
    estimated_runtime_s: Positive = Field(description="estimate on this card type; sim agents run this long")
    output_unit: str | None = None
    labels: dict[str, str] = Field(
        default_factory=dict, description="the submission's labels (a simulated agent reports `sim_util_pct`)"
    )


class LeaseGrantCommand(Envelope):
    """Start the task on these GPUs; renew the lease by heartbeat before `expires_at`."""

    type: Literal["command.lease_grant"] = "command.lease_grant"
    data: LeaseGrantOrder


class PreemptOrder(Payload):
    agent_id: EntityId
    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    grace_s: NonNegative = Field(60.0, description="seconds to checkpoint and exit before SIGKILL")
    detail: Detail = ""


class PreemptCommand(Envelope):
    """Checkpoint, then stop within `grace_s` seconds: the GPUs go to higher-class work."""

    type: Literal["command.preempt"] = "command.preempt"
    data: PreemptOrder


class RevokeOrder(Payload):
    agent_id: EntityId
    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    reason: RevokeReason
    grace_s: NonNegative = 30.0
    checkpoint_first: bool = True
    detail: Detail = ""


class RevokeCommand(Envelope):
    """Stop within `grace_s` seconds (checkpoint first when `checkpoint_first`)."""

    type: Literal["command.revoke"] = "command.revoke"
    data: RevokeOrder


AgentCommand = Annotated[
    Union[LeaseGrantCommand, PreemptCommand, RevokeCommand],
    Field(discriminator="type"),
]
"""Anything the dispatcher writes to an agent's inbox `cf:agent:<id>`."""
