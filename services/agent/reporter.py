"""Appends the agent's reports to `cf:reports`, in order, surviving Redis outages.

Reports are built into envelopes when queued (subject `agent/<id>`, producer `agent/<id>`, actor
`agent:<id>`, `subject_seq` counting from 1 and restarting at every `report.registered`), and
written by one background task in FIFO order with the events' wire format
(`shared.delivery.wire.wire_fields`). While Redis is unreachable the queue waits and the writer
retries with exponential back-off and jitter — except heartbeats: one a write failed to deliver
is dropped (stale by the time Redis is back, it would claim its leases held when it arrived; the
agent heartbeats again only once Redis answers); a queue grown past `max_backlog` sheds the oldest
heartbeats and progress reports first (each is superseded by a later one). A write that failed
half-way may be repeated: the dispatcher de-duplicates reports by event id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from redis.asyncio import Redis
from redis.backoff import ExponentialWithJitterBackoff

from shared.delivery.wire import wire_fields
from shared.event_wait import wait_until_set
from shared.events import make_event
from shared.events.envelope import Envelope
from shared.events.subjects import agent_subject
from shared.logging import get_logger
from shared.names import REPORTS_STREAM

from services.agent.state import Outgoing

log = get_logger(__name__)

HEARTBEAT_TYPE = "report.heartbeat"
SHEDDABLE = frozenset({HEARTBEAT_TYPE, "report.progress"})
BATCH = 200


class ReportWriter:
    """The agent's single writer of `cf:reports` (see the module docstring)."""

    def __init__(
        self,
        redis: Redis,
        agent_id: str,
        *,
        stream: str = REPORTS_STREAM,
        max_backlog: int = 100_000,
        backoff: ExponentialWithJitterBackoff | None = None,
    ) -> None:
        self._redis = redis
        self._agent_id = agent_id
        self._stream = stream
        self._max_backlog = max_backlog
        self._backoff = backoff or ExponentialWithJitterBackoff(cap=5.0, base=0.1)
        self._queue: deque[Envelope] = deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._seq = 0
        self.healthy = True  # False from a failed write until the next successful one

    def send(self, outgoing: Outgoing) -> Envelope:
        """Queue one report; returns its envelope (written soon, in order)."""
        if outgoing.kind.model_fields["type"].default == "report.registered":
            self._seq = 0
        self._seq += 1
        envelope = make_event(
            outgoing.kind,
            subject=agent_subject(self._agent_id),
            subject_seq=self._seq,
            producer=f"agent/{self._agent_id}",
            actor=f"agent:{self._agent_id}",
            data=outgoing.data,
            correlation_id=outgoing.correlation_id,
            causation_id=outgoing.causation_id,
        )
        self._queue.append(envelope)
        self._shed()
        self._idle.clear()
        self._wakeup.set()
        return envelope

    @property
    def backlog(self) -> int:
        return len(self._queue)

    async def run(self, stop: asyncio.Event) -> None:
        """Write queued reports until `stop` is set (then `flush` writes what is left)."""
        failures = 0
        while not stop.is_set():
            if not self._queue:
                self._idle.set()
                self._wakeup.clear()
                await _first_of(self._wakeup.wait(), stop.wait())
                continue
            if await self._write_batch():
                failures = 0
                continue
            failures += 1
            await wait_until_set(stop, self._backoff.compute(failures))

    async def flush(self, timeout: float) -> bool:
        """Write what is queued, for at most `timeout` seconds; True if nothing is left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._queue and loop.time() < deadline:
            if not await self._write_batch():
                await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))
        return not self._queue

    async def wait_written(self, timeout: float) -> bool:
        """Wait until the queue is empty (written by `run`); True if it is."""
        await wait_until_set(self._idle, timeout)
        return not self._queue

    async def _write_batch(self) -> bool:
        batch = [self._queue[i] for i in range(min(BATCH, len(self._queue)))]
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for envelope in batch:
                    pipe.xadd(self._stream, wire_fields(envelope))
                await pipe.execute()
        except Exception as exc:  # Redis down, restarting, loading, refusing: retry later, never crash
            if self.healthy:
                log.warning("cannot write reports; retrying with back-off", error=repr(exc), backlog=len(self._queue))
            self.healthy = False
            self._drop_heartbeats_of(batch)
            return False
        for envelope in batch:  # normally the head of the queue, unless shed meanwhile
            if self._queue and self._queue[0] is envelope:
                self._queue.popleft()
            else:
                with contextlib.suppress(ValueError):
                    self._queue.remove(envelope)
        if not self.healthy:
            log.info("reports flowing again", backlog=len(self._queue))
        self.healthy = True
        return True

    def _drop_heartbeats_of(self, failed: list[Envelope]) -> None:
        """A heartbeat is written when built or never: one a write failed to deliver is dropped. It says
        which leases were held when it was built; arriving after an outage it would tell the dispatcher
        they were held when it ARRIVED (`shared.leasing.work.run_end`), so a run that ended meanwhile
        would be charged until then. The next tick builds a fresh one once Redis answers."""
        stale = {id(envelope) for envelope in failed if envelope.type == HEARTBEAT_TYPE}
        if stale:
            self._queue = deque(envelope for envelope in self._queue if id(envelope) not in stale)

    def _shed(self) -> None:
        while len(self._queue) > self._max_backlog:
            victim = next((e for e in self._queue if e.type in SHEDDABLE), None)
            if victim is None:
                victim = self._queue[0]
            self._queue.remove(victim)
            log.warning("report backlog full; dropped a report", type=victim.type, backlog=len(self._queue))


async def _first_of(*waits: object) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]  # type: ignore[arg-type]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
