"""Messages between the dispatcher and agents: agent reports (`cf:reports`) and commands (inboxes).

These are NOT events of `cf:events`: they are observations and instructions, and the dispatcher
turns the ones it accepts into events. Each report names its agent, and every report about a
lease carries the lease's fencing token, so the dispatcher can reject stale or foreign reports.
`AgentReport` and `AgentCommand` are discriminated unions on `kind`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from shared.events.envelope import new_event_id, utcnow
from shared.events.reasons import NodeMode, RevokeReason
from shared.events.values import Detail, EntityId, FencingToken, Fraction, GpuIndices, NonNegative, Positive
from shared.submission import Command
from shared.submission.problems import Problem, describe, problems_from


class Message(BaseModel):
    """Fields common to reports and commands: a unique id (for de-duplication) and when it was sent."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    message_id: str = Field(default_factory=new_event_id, min_length=26, max_length=26)
    sent_at: AwareDatetime = Field(default_factory=utcnow)
    agent_id: EntityId

_WHOLE = "(whole input)"


# ---- reports: agent -> dispatcher (cf:reports) ---------------------------------------------


class GpuInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    index: int = Field(ge=0)
    vram_gb: Positive
    uuid: str | None = None


class LeaseHeld(BaseModel):
    """A lease as the agent holding it sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken
    progress: Fraction | None = None


class AgentRegistered(Message):
    """An agent (re)started and announces its node and GPUs."""

    kind: Literal["agent.registered"] = "agent.registered"
    node_id: EntityId
    card_type: EntityId
    mode: NodeMode
    gpus: tuple[GpuInfo, ...] = Field(min_length=1)
    held_leases: tuple[LeaseHeld, ...] = Field((), description="leases still running after an agent restart")


class GpuUtilisation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    index: int = Field(ge=0)
    util_pct: float = Field(ge=0, le=100)
    memory_used_gb: NonNegative | None = None


class Heartbeat(Message):
    """Periodic: renews every lease listed and reports per-GPU utilisation."""

    kind: Literal["agent.heartbeat"] = "agent.heartbeat"
    node_id: EntityId
    leases: tuple[LeaseHeld, ...] = ()
    gpus: tuple[GpuUtilisation, ...] = ()


class LeaseReport(Message):
    """Base of reports about one lease: which lease, under which fencing token, for which task."""

    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken


class TaskProgress(LeaseReport):
    """The task reported progress (and, optionally, output produced so far)."""

    kind: Literal["task.progress"] = "task.progress"
    progress: Fraction | None = None
    output_units: NonNegative | None = Field(None, description="cumulative output so far")
    message: Detail = ""


class TaskCheckpointed(LeaseReport):
    """The task wrote a checkpoint (the dispatcher records it as the `task.checkpointed` event)."""

    kind: Literal["task.checkpointed"] = "task.checkpointed"
    checkpoint_uri: str = Field(min_length=1)
    checksum: str | None = None
    progress: Fraction | None = None


class TaskFinished(LeaseReport):
    """The task's process ended (the dispatcher decides succeeded / failed / requeued)."""

    kind: Literal["task.finished"] = "task.finished"
    exit_code: int | None = Field(description="None when the process was killed by a signal")
    output_units: NonNegative | None = Field(None, description="total output of the run")
    error: Detail | None = Field(None, description="last lines of stderr or the agent's own error")


AgentReport = Annotated[
    Union[AgentRegistered, Heartbeat, TaskProgress, TaskCheckpointed, TaskFinished],
    Field(discriminator="kind"),
]


# ---- commands: dispatcher -> agent (cf:agent:<id>) -------------------------------------------


class LeaseCommand(Message):
    """Base of commands about one lease; an agent ignores a command with a stale fencing token."""

    lease_id: EntityId
    task_id: EntityId
    fencing_token: FencingToken


class LeaseGrantCommand(LeaseCommand):
    """Start the task on these GPUs; renew by heartbeat before `expires_at`."""

    kind: Literal["lease.grant"] = "lease.grant"
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


class PreemptCommand(LeaseCommand):
    """Checkpoint, then stop within `grace_s` seconds: the GPUs go to higher-class work."""

    kind: Literal["lease.preempt"] = "lease.preempt"
    grace_s: NonNegative = 60.0
    detail: Detail = ""


class RevokeCommand(LeaseCommand):
    """Stop within `grace_s` seconds (checkpoint first when `checkpoint_first`)."""

    kind: Literal["lease.revoke"] = "lease.revoke"
    reason: RevokeReason
    grace_s: NonNegative = 30.0
    checkpoint_first: bool = True
    detail: Detail = ""


AgentCommand = Annotated[
    Union[LeaseGrantCommand, PreemptCommand, RevokeCommand],
    Field(discriminator="kind"),
]

REPORT_KINDS: dict[str, type[Message]] = {
    cls.model_fields["kind"].default: cls
    for cls in (AgentRegistered, Heartbeat, TaskProgress, TaskCheckpointed, TaskFinished)
}
COMMAND_KINDS: dict[str, type[Message]] = {
    cls.model_fields["kind"].default: cls for cls in (LeaseGrantCommand, PreemptCommand, RevokeCommand)
}


class MessageParseError(ValueError):
    """A report or command body that does not validate; `.problems` names each field."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(f"cannot parse agent message:\n{describe(problems)}")


def parse_report(body: bytes | str | dict[str, Any]) -> AgentReport:
    """The typed agent report in `body` (JSON or a decoded dict); raises `MessageParseError`."""
    return _parse(REPORT_KINDS, body)


def parse_command(body: bytes | str | dict[str, Any]) -> AgentCommand:
    """The typed dispatcher command in `body` (JSON or a decoded dict); raises `MessageParseError`."""
    return _parse(COMMAND_KINDS, body)


def _parse(kinds: dict[str, type[Message]], body: bytes | str | dict[str, Any]) -> Any:
    raw = body
    if not isinstance(raw, dict):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise MessageParseError([Problem(field=_WHOLE, value=None, expected=f"JSON ({error})")]) from None
    if not isinstance(raw, dict):
        raise MessageParseError([Problem(field=_WHOLE, value=None, expected="a JSON object")])
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in kinds:
        value = kind if isinstance(kind, (str, int, float, bool)) else None
        expected = "one of " + ", ".join(sorted(kinds))
        raise MessageParseError([Problem(field="kind", value=value, expected=expected)])
    try:
        return kinds[kind].model_validate(raw)
    except ValidationError as error:
        raise MessageParseError(problems_from(error)) from None
