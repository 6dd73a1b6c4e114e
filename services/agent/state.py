"""The agent's lease state machine: what to do on each command, what to report on each observation.

Pure: no I/O, no clock (`now` is a parameter), no randomness. The daemon feeds it the commands it
reads from its inbox and what its runner observes, and carries out the decisions it returns.

A lease the agent holds goes through two phases:

    (not held) --grant--> RUNNING --preempt/revoke--> STOPPING --process exit--> (not held)
                             |                                                     ^
                             +---------------- process exit -----------------------+

- RUNNING: the task runs on the lease's GPUs; every heartbeat renews the lease.
- STOPPING: a preempt or revoke asked the runner to stop it (checkpoint first, grace period);
  still renewed until the run ends, so the dispatcher does not expire it meanwhile.
- Ended leases are remembered (bounded) so a redelivered grant never starts a task twice.

Every command is handled at most once (commands are de-duplicated by their event id, grants by
their lease id); a command with a fencing token other than the lease's is stale and ignored.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from shared.events.envelope import Envelope, Payload
from shared.events.reasons import NodeMode
from shared.events.reports import (
    AgentRegistered,
    AgentRegisteredReport,
    CheckpointReport,
    GpuInfo,
    GpuUtilisation,
    Heartbeat,
    HeartbeatReport,
    LeaseGrantCommand,
    LeaseGrantOrder,
    LeaseHeld,
    PreemptCommand,
    RevokeCommand,
    TaskCheckpointed,
    TaskFinished,
    TaskFinishedReport,
    TaskProgress,
    TaskProgressReport,
)

Command = LeaseGrantCommand | PreemptCommand | RevokeCommand

REMEMBERED = 10_000
"""How many handled command ids and ended lease ids the state remembers for de-duplication."""


class StopKind(StrEnum):
    """Why the agent stops a run before it ends on its own."""

    PREEMPT = "preempted"  # the dispatcher preempted the lease: checkpoint, then stop
    REVOKE = "revoked"  # the dispatcher revoked the lease (checkpoint first if asked)
    SHUTDOWN = "agent_stopped"  # the agent daemon itself is shutting down


class IgnoreReason(StrEnum):
    """Why a command changes nothing (logged, then acknowledged)."""

    DUPLICATE_COMMAND = "duplicate_command"  # this command id was handled before (redelivery)
    DUPLICATE_GRANT = "duplicate_grant"  # this lease was granted to us before (held or ended)
    WRONG_AGENT = "wrong_agent"  # the command names another agent
    NOT_HELD = "not_held"  # preempt/revoke of a lease we do not hold (ended meanwhile)
    STALE_TOKEN = "stale_token"  # its fencing token is not the lease's
    ALREADY_STOPPING = "already_stopping"  # a preempt/revoke for this lease is already under way


class RefuseReason(StrEnum):
    """Why a grant is answered with an immediate `TaskFinished` instead of a run."""

    UNKNOWN_GPUS = "unknown_gpus"  # the grant names GPU indices this node does not have
    GPUS_BUSY = "gpus_busy"  # another lease still runs on some of the GPUs
    EXPIRED = "expired"  # the lease expired before the grant reached the agent
    PREDATES_AGENT = "predates_agent"  # granted before this agent process started (restart)


@dataclass(frozen=True, slots=True)
class LeaseRun:
    """A lease this agent holds, and what it last observed of its run."""

    order: LeaseGrantOrder
    grant_id: str  # event id of the grant (causation of every report about the lease)
    correlation_id: str
    progress: float | None = None
    output_units: float | None = None
    stopping: StopKind | None = None
    stop_detail: str = ""

    @property
    def lease_id(self) -> str:
        return self.order.lease_id

    def held(self) -> LeaseHeld:
        return LeaseHeld(
            lease_id=self.lease_id,
            task_id=self.order.task_id,
            fencing_token=self.order.fencing_token,
            progress=self.progress,
        )


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A report to append to `cf:reports`; reports about a lease name its grant as their cause."""

    kind: type[Envelope]
    data: Payload
    causation_id: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """Start a run for this lease."""

    run: LeaseRun


@dataclass(frozen=True, slots=True)
class Stop:
    """Ask the runner to stop the lease's run (it then reports the exit)."""

    lease_id: str
    kind: StopKind
    grace_s: float
    checkpoint_first: bool


@dataclass(frozen=True, slots=True)
class Refuse:
    """Do not run the grant; report it finished at once with the reason."""

    reason: RefuseReason
    report: Outgoing


@dataclass(frozen=True, slots=True)
class Ignore:
    reason: IgnoreReason
    detail: str


Decision = Start | Stop | Refuse | Ignore


@dataclass
class AgentState:
    """Every lease this agent holds, plus the memory that makes command handling idempotent."""

    agent_id: str
    node_id: str
    gpu_indices: frozenset[int]
    started_at: datetime
    leases: dict[str, LeaseRun] = field(default_factory=dict)
    _handled: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _ended: OrderedDict[str, None] = field(default_factory=OrderedDict)

    # ---- commands ------------------------------------------------------------------------

    def on_command(self, command: Command, now: datetime) -> Decision:
        """Decide what one inbox command means; the state already reflects the decision."""
        if command.event_id in self._handled:
            return Ignore(IgnoreReason.DUPLICATE_COMMAND, f"command {command.event_id} was handled before")
        if command.data.agent_id != self.agent_id:
            return Ignore(IgnoreReason.WRONG_AGENT, f"command for agent {command.data.agent_id}")
        _remember(self._handled, command.event_id)
        if isinstance(command, LeaseGrantCommand):
            return self._grant(command, now)
        if isinstance(command, PreemptCommand):
            order = command.data
            return self._stop(order.lease_id, order.fencing_token, StopKind.PREEMPT, order.grace_s, True, order.detail)
        order = command.data
        detail = f"{order.reason}: {order.detail}" if order.detail else str(order.reason)
        return self._stop(
            order.lease_id, order.fencing_token, StopKind.REVOKE, order.grace_s, order.checkpoint_first, detail
        )

    def _grant(self, command: LeaseGrantCommand, now: datetime) -> Decision:
        order = command.data
        if order.lease_id in self.leases or order.lease_id in self._ended:
            return Ignore(IgnoreReason.DUPLICATE_GRANT, f"lease {order.lease_id} was granted before")
        run = LeaseRun(order, command.event_id, command.correlation_id or command.event_id)
        refusal = self._refusal(order, command.occurred_at, now)
        if refusal is not None:
            reason, detail = refusal
            _remember(self._ended, order.lease_id)
            return Refuse(reason, self._finished(run, None, None, f"not started ({reason}): {detail}"))
        self.leases[order.lease_id] = run
        return Start(run)

    def _refusal(self, order: LeaseGrantOrder, granted_at: datetime, now: datetime) -> tuple[RefuseReason, str] | None:
        unknown = sorted(set(order.gpu_indices) - self.gpu_indices)
        if unknown:
            return RefuseReason.UNKNOWN_GPUS, f"this node has no GPU {_indices(unknown)}"
        for other in self.leases.values():
            busy = sorted(set(order.gpu_indices) & set(other.order.gpu_indices))
            if busy:
                return RefuseReason.GPUS_BUSY, f"GPU {_indices(busy)} still run lease {other.lease_id}"
        if order.expires_at <= now:
            return RefuseReason.EXPIRED, f"the lease expired at {order.expires_at.isoformat()}"
        if granted_at < self.started_at:
            return RefuseReason.PREDATES_AGENT, "granted before this agent process started"
        return None

    def _stop(
        self, lease_id: str, token: int, kind: StopKind, grace_s: float, checkpoint_first: bool, detail: str
    ) -> Decision:
        run = self.leases.get(lease_id)
        if run is None:
            return Ignore(IgnoreReason.NOT_HELD, f"lease {lease_id} is not held here")
        if token != run.order.fencing_token:
            return Ignore(IgnoreReason.STALE_TOKEN, f"token {token} is not lease {lease_id}'s {run.order.fencing_token}")
        if run.stopping is not None:
            return Ignore(IgnoreReason.ALREADY_STOPPING, f"lease {lease_id} is already being {run.stopping}")
        self.leases[lease_id] = replace(run, stopping=kind, stop_detail=detail)
        return Stop(lease_id, kind, grace_s, checkpoint_first)

    def stop_all(self, grace_s: float) -> list[Stop]:
        """The agent shuts down: stop every run not already stopping (checkpoint first)."""
        stops = []
        for lease_id, run in list(self.leases.items()):
            if run.stopping is None:
                self.leases[lease_id] = replace(run, stopping=StopKind.SHUTDOWN, stop_detail="the agent is shutting down")
                stops.append(Stop(lease_id, StopKind.SHUTDOWN, grace_s, True))
        return stops

    # ---- observations of runs --------------------------------------------------------------

    def on_progress(
        self, lease_id: str, progress: float | None, output_units: float | None, message: str = ""
    ) -> Outgoing | None:
        """A run reported progress; None if the lease is no longer held (late observation)."""
        run = self.leases.get(lease_id)
        if run is None:
            return None
        run = self._observe(run, progress, output_units)
        report = TaskProgressReport(
            **_lease_fields(self.agent_id, run),
            progress=run.progress,
            output_units=run.output_units,
            message=message[:2000],
        )
        return _about(run, TaskProgress, report)

    def on_checkpoint(
        self, lease_id: str, checkpoint_uri: str, progress: float | None, checksum: str | None = None
    ) -> Outgoing | None:
        """A run wrote a checkpoint; None if the lease is no longer held."""
        run = self.leases.get(lease_id)
        if run is None:
            return None
        run = self._observe(run, progress, None)
        report = CheckpointReport(
            **_lease_fields(self.agent_id, run), checkpoint_uri=checkpoint_uri, checksum=checksum, progress=run.progress
        )
        return _about(run, TaskCheckpointed, report)

    def on_exit(
        self, lease_id: str, exit_code: int | None, output_units: float | None, error: str | None
    ) -> Outgoing | None:
        """A run ended: release the lease and report how (a stop's kind leads the error text)."""
        run = self.leases.pop(lease_id, None)
        if run is None:
            return None
        _remember(self._ended, lease_id)
        if run.stopping is not None:
            stopped = f"{run.stopping}: {run.stop_detail}" if run.stop_detail else str(run.stopping)
            error = f"{stopped}; {error}" if error else stopped
        return self._finished(run, exit_code, output_units, error)

    def note_progress(self, progress: dict[str, float]) -> None:
        """Record runs' current progress without reporting it (the next heartbeat carries it)."""
        for lease_id, value in progress.items():
            run = self.leases.get(lease_id)
            if run is not None:
                self._observe(run, value, None)

    def _observe(self, run: LeaseRun, progress: float | None, output_units: float | None) -> LeaseRun:
        updated = replace(
            run,
            progress=run.progress if progress is None else _fraction(progress),
            output_units=run.output_units if output_units is None else max(0.0, output_units),
        )
        self.leases[run.lease_id] = updated
        return updated

    def _finished(
        self, run: LeaseRun, exit_code: int | None, output_units: float | None, error: str | None
    ) -> Outgoing:
        report = TaskFinishedReport(
            **_lease_fields(self.agent_id, run),
            exit_code=exit_code,
            output_units=None if output_units is None else max(0.0, output_units),
            error=None if error is None else error[-2000:],
        )
        return _about(run, TaskFinished, report)

    # ---- periodic reports ------------------------------------------------------------------

    def heartbeat(self, gpus: tuple[GpuUtilisation, ...]) -> Outgoing:
        """Renews every lease held (running or stopping) and reports per-GPU utilisation."""
        report = HeartbeatReport(
            agent_id=self.agent_id,
            node_id=self.node_id,
            leases=tuple(run.held() for run in self.leases.values()),
            gpus=gpus,
        )
        return Outgoing(Heartbeat, report)

    def registration(self, card_type: str, mode: NodeMode, gpus: tuple[GpuInfo, ...], *,
                     time_scale: float = 1.0) -> Outgoing:
        """Announces the node, its GPUs, its clock speed and the leases still held (after a reconnect)."""
        report = AgentRegisteredReport(
            agent_id=self.agent_id,
            node_id=self.node_id,
            card_type=card_type,
            mode=mode,
            gpus=gpus,
            held_leases=tuple(run.held() for run in self.leases.values()),
            started_at=self.started_at,
            time_scale=time_scale,
        )
        return Outgoing(AgentRegistered, report)

    def busy_gpus(self) -> dict[int, LeaseRun]:
        """GPU index -> the lease running on it."""
        return {index: run for run in self.leases.values() for index in run.order.gpu_indices}


def _about(run: LeaseRun, kind: type[Envelope], report: Payload) -> Outgoing:
    return Outgoing(kind, report, causation_id=run.grant_id, correlation_id=run.correlation_id)


def _lease_fields(agent_id: str, run: LeaseRun) -> dict[str, object]:
    order = run.order
    return {"agent_id": agent_id, "lease_id": order.lease_id, "task_id": order.task_id, "fencing_token": order.fencing_token}


def _remember(memory: OrderedDict[str, None], key: str) -> None:
    memory[key] = None
    memory.move_to_end(key)
    while len(memory) > REMEMBERED:
        memory.popitem(last=False)


def _fraction(value: float) -> float:
    return min(1.0, max(0.0, float(value)))


def _indices(indices: list[int]) -> str:
    return ",".join(str(i) for i in indices)
