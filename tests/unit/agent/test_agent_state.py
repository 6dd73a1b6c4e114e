"""The agent's lease state machine: idempotent grants, stops, fencing, refusals, what gets reported."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.agent.state import (
    REMEMBERED,
    AgentState,
    Ignore,
    IgnoreReason,
    Refuse,
    RefuseReason,
    Start,
    Stop,
    StopKind,
)
from shared.events import make_event
from shared.events.reasons import NodeMode
from shared.events.reports import (
    AgentRegistered,
    GpuInfo,
    GpuUtilisation,
    Heartbeat,
    LeaseGrantCommand,
    PreemptCommand,
    RevokeCommand,
    TaskCheckpointed,
    TaskFinished,
    TaskProgress,
)
from shared.events.subjects import agent_subject

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
AGENT = "a1"


def an_agent(gpus: int = 8, started_at: datetime = T0) -> AgentState:
    return AgentState(AGENT, "node-1", frozenset(range(gpus)), started_at=started_at)


def a_command(cls: type, seq: int = 1, at: datetime = T0 + timedelta(seconds=1), **data: Any) -> Any:
    return make_event(
        cls,
        subject=agent_subject(data.get("agent_id", AGENT)),
        subject_seq=seq,
        producer="dispatcher/test",
        actor="service:dispatcher",
        data={"agent_id": AGENT, **data},
        occurred_at=at,
    )


def a_grant(lease: str = "L1", token: int = 7, gpus: tuple[int, ...] = (0, 1), **extra: Any) -> LeaseGrantCommand:
    data = {
        "lease_id": lease,
        "task_id": f"T-{lease}",
        "fencing_token": token,
        "gpu_indices": gpus,
        "ttl_s": 30,
        "expires_at": T0 + timedelta(minutes=5),
        "estimated_runtime_s": 600,
        **extra,
    }
    return a_command(LeaseGrantCommand, **data)


def a_preempt(lease: str = "L1", token: int = 7) -> PreemptCommand:
    return a_command(PreemptCommand, lease_id=lease, task_id=f"T-{lease}", fencing_token=token, grace_s=5)


def a_revoke(lease: str = "L1", token: int = 7, checkpoint_first: bool = False) -> RevokeCommand:
    return a_command(
        RevokeCommand, lease_id=lease, task_id=f"T-{lease}", fencing_token=token, reason="cancelled",
        checkpoint_first=checkpoint_first, detail="user asked",
    )


NOW = T0 + timedelta(seconds=2)


def test_a_grant_starts_one_run_and_is_held() -> None:
    state = an_agent()
    grant = a_grant()
    decision = state.on_command(grant, NOW)
    assert isinstance(decision, Start)
    assert decision.run.order == grant.data
    assert list(state.leases) == ["L1"]


def test_the_same_grant_delivered_twice_starts_one_run() -> None:
    state = an_agent()
    grant = a_grant()
    assert isinstance(state.on_command(grant, NOW), Start)
    again = state.on_command(grant, NOW)
    assert isinstance(again, Ignore) and again.reason is IgnoreReason.DUPLICATE_COMMAND


def test_a_second_grant_message_for_the_same_lease_starts_nothing() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    resent = a_grant()  # a new message id, same lease (the dispatcher re-sent it)
    decision = state.on_command(resent, NOW)
    assert isinstance(decision, Ignore) and decision.reason is IgnoreReason.DUPLICATE_GRANT
    assert len(state.leases) == 1


def test_a_grant_for_a_lease_that_already_ended_is_not_run_again() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    state.on_exit("L1", 0, 10.0, None)
    decision = state.on_command(a_grant(), NOW)
    assert isinstance(decision, Ignore) and decision.reason is IgnoreReason.DUPLICATE_GRANT
    assert state.leases == {}


def test_preempt_asks_for_a_checkpoint_and_the_exit_is_reported_as_preempted() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    decision = state.on_command(a_preempt(), NOW)
    assert decision == Stop("L1", StopKind.PREEMPT, 5.0, checkpoint_first=True)
    checkpoint = state.on_checkpoint("L1", "sim://T-L1/0.400000", 0.4)
    finished = state.on_exit("L1", None, 40.0, "stopped at progress 0.4")
    assert checkpoint is not None and checkpoint.kind is TaskCheckpointed
    assert checkpoint.data.checkpoint_uri == "sim://T-L1/0.400000" and checkpoint.data.fencing_token == 7
    assert finished is not None and finished.kind is TaskFinished
    assert finished.data.error is not None and finished.data.error.startswith("preempted")
    assert (finished.data.lease_id, finished.data.fencing_token, finished.data.exit_code) == ("L1", 7, None)
    assert state.leases == {}


def test_revoke_stops_with_its_reason_and_checkpoint_flag() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    decision = state.on_command(a_revoke(checkpoint_first=False), NOW)
    assert isinstance(decision, Stop) and decision.kind is StopKind.REVOKE and not decision.checkpoint_first
    finished = state.on_exit("L1", None, None, None)
    assert finished is not None and finished.data.error == "revoked: cancelled: user asked"


@pytest.mark.parametrize("token", [6, 8])
def test_a_stop_with_another_token_is_stale_and_ignored(token: int) -> None:
    state = an_agent()
    state.on_command(a_grant(token=7), NOW)
    decision = state.on_command(a_preempt(token=token), NOW)
    assert isinstance(decision, Ignore) and decision.reason is IgnoreReason.STALE_TOKEN
    assert state.leases["L1"].stopping is None


def test_a_stop_for_a_lease_not_held_is_ignored() -> None:
    decision = an_agent().on_command(a_preempt("L9"), NOW)
    assert isinstance(decision, Ignore) and decision.reason is IgnoreReason.NOT_HELD


def test_a_second_stop_while_stopping_is_ignored_but_the_lease_stays_held() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    state.on_command(a_preempt(), NOW)
    decision = state.on_command(a_revoke(), NOW)
    assert isinstance(decision, Ignore) and decision.reason is IgnoreReason.ALREADY_STOPPING
    heartbeat = state.heartbeat(())
    assert [held.lease_id for held in heartbeat.data.leases] == ["L1"]  # still renewed until it exits


def test_a_command_for_another_agent_is_ignored() -> None:
    grant = a_grant()
    state = AgentState("someone-else", "n", frozenset(range(8)), started_at=T0)
    decision = state.on_command(grant, NOW)
    assert isinstance(decision, Ignore) and decision.reason is IgnoreReason.WRONG_AGENT


@pytest.mark.parametrize(
    ("state_kwargs", "grant", "now", "reason"),
    [
        ({"gpus": 2}, a_grant(gpus=(1, 2)), NOW, RefuseReason.UNKNOWN_GPUS),
        ({}, a_grant(), T0 + timedelta(minutes=6), RefuseReason.EXPIRED),
        ({"started_at": T0 + timedelta(seconds=10)}, a_grant(), T0 + timedelta(seconds=11), RefuseReason.PREDATES_AGENT),
    ],
)
def test_grants_that_cannot_run_are_refused_with_a_finished_report(
    state_kwargs: dict[str, Any], grant: LeaseGrantCommand, now: datetime, reason: RefuseReason
) -> None:
    state = an_agent(**state_kwargs)
    decision = state.on_command(grant, now)
    assert isinstance(decision, Refuse) and decision.reason is reason
    report = decision.report
    assert report.kind is TaskFinished and report.data.exit_code is None
    assert report.data.fencing_token == grant.data.fencing_token and report.causation_id == grant.event_id
    assert reason in (report.data.error or "")
    assert state.leases == {}


def test_a_grant_on_gpus_another_lease_runs_on_is_refused() -> None:
    state = an_agent()
    state.on_command(a_grant("L1", gpus=(0, 1)), NOW)
    decision = state.on_command(a_grant("L2", gpus=(1, 2)), NOW)
    assert isinstance(decision, Refuse) and decision.reason is RefuseReason.GPUS_BUSY
    assert "L1" in (decision.report.data.error or "")
    assert isinstance(state.on_command(a_grant("L3", gpus=(2, 3)), NOW), Start)


def test_reports_about_a_lease_carry_its_token_and_name_the_grant_as_cause() -> None:
    state = an_agent()
    grant = a_grant(token=42)
    state.on_command(grant, NOW)
    progress = state.on_progress("L1", 0.25, 120.0, "epoch 1")
    assert progress is not None and progress.kind is TaskProgress
    assert (progress.data.fencing_token, progress.data.progress, progress.data.output_units) == (42, 0.25, 120.0)
    assert progress.causation_id == grant.event_id and progress.correlation_id == grant.event_id
    heartbeat = state.heartbeat((GpuUtilisation(index=0, util_pct=91.0),))
    assert heartbeat.kind is Heartbeat
    assert [(h.lease_id, h.fencing_token, h.progress) for h in heartbeat.data.leases] == [("L1", 42, 0.25)]


def test_observations_after_the_exit_report_nothing() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    assert state.on_exit("L1", 0, 1.0, None) is not None
    assert state.on_exit("L1", 0, 1.0, None) is None
    assert state.on_progress("L1", 0.5, None) is None
    assert state.on_checkpoint("L1", "x", 0.5) is None


def test_a_checkpoint_without_progress_keeps_the_last_known_progress() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    state.on_progress("L1", 0.3, None)
    checkpoint = state.on_checkpoint("L1", "s3://b/ckpt", None)
    assert checkpoint is not None and checkpoint.data.progress == 0.3


def test_registration_lists_gpus_and_the_leases_still_held() -> None:
    state = an_agent(gpus=2)
    state.on_command(a_grant(gpus=(0,)), NOW)
    gpus = (GpuInfo(index=0, vram_gb=80), GpuInfo(index=1, vram_gb=80))
    registration = state.registration("H100", NodeMode.SIM, gpus, time_scale=600)
    assert registration.kind is AgentRegistered and registration.data.time_scale == 600
    assert registration.data.card_type == "H100" and len(registration.data.gpus) == 2
    assert [held.lease_id for held in registration.data.held_leases] == ["L1"]
    assert registration.data.started_at == T0  # grants before it are void (refused here, lost there)


def test_shutdown_stops_every_running_lease_once() -> None:
    state = an_agent()
    state.on_command(a_grant("L1", gpus=(0,)), NOW)
    state.on_command(a_grant("L2", gpus=(1,)), NOW)
    state.on_command(a_preempt("L2"), NOW)
    stops = state.stop_all(grace_s=3.0)
    assert stops == [Stop("L1", StopKind.SHUTDOWN, 3.0, True)]


def test_memory_of_handled_commands_is_bounded() -> None:
    state = an_agent()
    first = a_grant("L0", gpus=(0,))
    state.on_command(first, NOW)
    state.on_exit("L0", 0, None, None)
    for n in range(1, REMEMBERED + 1):
        state.on_command(a_preempt(f"X{n}"), NOW)  # not held: remembered as handled, changes nothing
    assert len(state._handled) == REMEMBERED
    assert first.event_id not in state._handled


def test_noted_progress_is_carried_by_the_next_heartbeat_without_a_report() -> None:
    state = an_agent()
    state.on_command(a_grant(), NOW)
    state.note_progress({"L1": 0.37, "L-unknown": 0.5})
    assert [held.progress for held in state.heartbeat(()).data.leases] == [0.37]
