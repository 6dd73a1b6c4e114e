"""The report writer's queue: envelopes, sequence numbers restarting at registration, backlog shedding."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from services.agent.reporter import ReportWriter
from services.agent.state import Outgoing
from shared.events.reports import (
    AgentRegistered,
    AgentRegisteredReport,
    GpuInfo,
    Heartbeat,
    HeartbeatReport,
    TaskFinished,
    TaskFinishedReport,
)


def a_writer(**kwargs: Any) -> ReportWriter:
    return ReportWriter(redis=None, agent_id="a1", **kwargs)  # type: ignore[arg-type]  # send() never touches Redis


HEARTBEAT = Outgoing(Heartbeat, HeartbeatReport(agent_id="a1", node_id="n1"))
REGISTERED = Outgoing(
    AgentRegistered,
    AgentRegisteredReport(agent_id="a1", node_id="n1", card_type="H100", mode="sim", gpus=(GpuInfo(index=0, vram_gb=80),)),
)


def a_finish(lease: str) -> Outgoing:
    report = TaskFinishedReport(agent_id="a1", lease_id=lease, task_id="T", fencing_token=1, exit_code=0)
    return Outgoing(TaskFinished, report, causation_id="01JCAUSE0000000000000000000", correlation_id="01JCORR00000000000000000000")


def test_envelopes_name_the_agent_and_link_to_their_cause() -> None:
    envelope = a_writer().send(a_finish("L1"))
    assert (envelope.subject, envelope.producer, envelope.actor) == ("agent/a1", "agent/a1", "agent:a1")
    assert envelope.causation_id == "01JCAUSE0000000000000000000"
    assert envelope.correlation_id == "01JCORR00000000000000000000"


def test_sequence_counts_from_one_and_restarts_at_every_registration() -> None:
    writer = a_writer()
    seqs = [writer.send(item).subject_seq for item in (REGISTERED, HEARTBEAT, HEARTBEAT, REGISTERED, HEARTBEAT)]
    assert seqs == [1, 2, 3, 1, 2]


def test_a_full_backlog_sheds_heartbeats_before_lease_reports() -> None:
    writer = a_writer(max_backlog=3)
    writer.send(a_finish("L1"))
    writer.send(HEARTBEAT)
    writer.send(a_finish("L2"))
    writer.send(a_finish("L3"))
    assert writer.backlog == 3
    writer.send(a_finish("L4"))  # nothing sheddable left: the oldest goes
    kept = [envelope.data.lease_id for envelope in writer._queue]
    assert kept == ["L2", "L3", "L4"]


async def test_a_heartbeat_a_write_failed_to_deliver_is_dropped_lease_reports_wait() -> None:
    # A real client of a port nothing listens on: the write fails as it does while Redis is down.
    redis = Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=1)
    writer = ReportWriter(redis=redis, agent_id="a1")
    writer.send(HEARTBEAT)
    writer.send(a_finish("L1"))
    writer.send(HEARTBEAT)
    assert not await writer._write_batch()
    late = writer.send(HEARTBEAT)  # built after the failure (the agent heartbeats once Redis answers)
    assert [(e.type, getattr(e.data, "lease_id", None)) for e in writer._queue] == [
        ("report.finished", "L1"), ("report.heartbeat", None)]
    assert writer._queue[-1] is late and not writer.healthy
    await redis.aclose()
