"""Support for the agent's integration tests: run an agent in-process, send it commands, read its reports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from services.agent.build import AgentOptions, build_daemon
from services.agent.daemon import AgentDaemon
from shared.delivery.wire import extract_body, wire_fields
from shared.events import make_event, utcnow
from shared.events.envelope import Envelope
from shared.events.parsing import parse_report
from shared.events.reports import LeaseGrantCommand, PreemptCommand, RevokeCommand
from shared.events.subjects import agent_subject
from shared.names import REPORTS_STREAM, agent_inbox
from tests.helpers.delivery_support import wait_until

__all__ = ["wait_until"]


@contextlib.asynccontextmanager
async def running_agent(redis_url: str, options: AgentOptions) -> AsyncIterator[AgentDaemon]:
    """An agent daemon running as an asyncio task until the block ends (then stopped gracefully)."""
    daemon = build_daemon(options, redis_url)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop), name=f"agent:{options.agent_id}")
    try:
        yield daemon
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)


class Dispatcher:
    """Plays the dispatcher's part: writes commands to an agent's inbox in the wire format."""

    def __init__(self, redis: Redis, agent_id: str) -> None:
        self.redis = redis
        self.agent_id = agent_id
        self._seq = 0

    async def send(self, cls: type[Envelope], **data: Any) -> Envelope:
        self._seq += 1
        command = make_event(
            cls,
            subject=agent_subject(self.agent_id),
            subject_seq=self._seq,
            producer="dispatcher/test",
            actor="service:dispatcher",
            data={"agent_id": self.agent_id, **data},
        )
        await self.resend(command)
        return command

    async def resend(self, command: Envelope) -> None:
        """Write the same command again (a redelivery as the agent would see it)."""
        await self.redis.xadd(agent_inbox(self.agent_id), wire_fields(command))

    async def grant(self, lease_id: str, task_id: str, gpus: tuple[int, ...], **data: Any) -> Envelope:
        fields = {
            "lease_id": lease_id,
            "task_id": task_id,
            "fencing_token": 1,
            "gpu_indices": gpus,
            "ttl_s": 30.0,
            "expires_at": utcnow() + timedelta(minutes=10),
            "estimated_runtime_s": 100.0,
            **data,
        }
        return await self.send(LeaseGrantCommand, **fields)

    async def preempt(self, lease_id: str, task_id: str, token: int, grace_s: float = 5.0) -> Envelope:
        return await self.send(PreemptCommand, lease_id=lease_id, task_id=task_id, fencing_token=token, grace_s=grace_s)

    async def revoke(self, lease_id: str, task_id: str, token: int, **data: Any) -> Envelope:
        fields = {"reason": "cancelled", "grace_s": 5.0, **data}
        return await self.send(RevokeCommand, lease_id=lease_id, task_id=task_id, fencing_token=token, **fields)


async def reports(redis: Redis) -> list[Envelope]:
    """Every report in `cf:reports`, parsed, in stream order."""
    entries = await redis.xrange(REPORTS_STREAM)
    return [parse_report(extract_body(fields)) for _, fields in entries]


def of_type(found: list[Envelope], report_type: str, lease_id: str | None = None) -> list[Envelope]:
    return [r for r in found if r.type == report_type and (lease_id is None or getattr(r.data, "lease_id", None) == lease_id)]


async def wait_for_reports(
    redis: Redis, condition: Callable[[list[Envelope]], bool], timeout: float = 60.0
) -> list[Envelope]:
    """Poll `cf:reports` until `condition(reports)` holds; returns the reports (assert on them)."""
    latest: list[Envelope] = []

    async def check() -> bool:
        nonlocal latest
        try:
            latest = await reports(redis)
        except RedisConnectionError:  # the test's own Redis is restarting
            return False
        return condition(latest)

    await wait_until(check, timeout=timeout)
    return latest


def finished(lease_id: str) -> Callable[[list[Envelope]], bool]:
    return lambda found: bool(of_type(found, "report.finished", lease_id))
