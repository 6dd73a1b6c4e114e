"""The agent daemon: inbox commands in, reports out, runs in between.

`AgentDaemon.run(stop)` is the whole life of an agent process:

1. wait until Redis answers (back-off), then register: node, card type, GPUs, leases held;
2. read the inbox `cf:agent:<id>` in consumer group `agent` (`reliable_batch_subscriber`): each command
   goes through `AgentState.on_command`, and the decision is carried out (start / stop a run,
   report a refusal, or log why nothing changes);
3. every `heartbeat_s`: check the Redis session, heartbeat (leases held + per-GPU utilisation);
   re-register every `register_every_s` and whenever Redis was unreachable or restarted (its
   `run_id` changed), re-creating the inbox group first in case the restart lost it;
4. runs report progress, checkpoints and exits through the daemon (it is their `RunSink`), which
   turns them into reports via the state;
5. on stop: stop reading, stop every run (checkpoint first, grace period), flush the reports.

Transient Redis errors never end the daemon: the report writer retries with back-off, FastStream's
readers retry on their own, and the next successful heartbeat re-registers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from faststream.redis import RedisBroker
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ResponseError

from shared.delivery.consumer import default_consumer_name, reliable_batch_subscriber
from shared.delivery.wire import ensure_group
from shared.event_wait import wait_until_set
from shared.events.envelope import utcnow
from shared.events.parsing import parse_command
from shared.logging import get_logger
from shared.names import AGENT_GROUP, agent_inbox

from services.agent.hardware import NodeHardware
from services.agent.metrics import AgentMetrics
from services.agent.reporter import ReportWriter
from services.agent.runner import Runner, RunSink
from services.agent.state import AgentState, Command, Ignore, Outgoing, Refuse, Start, Stop

log = get_logger(__name__)


@dataclass(frozen=True)
class AgentConfig:
    """How one agent process behaves (the CLI fills it from its options)."""

    agent_id: str
    node_id: str
    redis_url: str
    heartbeat_s: float = 2.0
    register_every_s: float = 30.0
    shutdown_grace_s: float = 30.0
    time_scale: float = 1.0  # registered: a simulated agent's runs go this many times faster than real time
    claim_idle_ms: int = 10_000  # commands left pending this long (a dead agent process) are re-read
    claim_every_ms: int = 3_000  # how often the inbox's claimer looks for them (each look costs a round trip)


class AgentDaemon:
    """One agent: the lease state machine wired to Redis and a runner (see the module docstring)."""

    def __init__(
        self,
        config: AgentConfig,
        hardware: NodeHardware,
        make_runner: Callable[[RunSink], Runner],
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.config = config
        self.hardware = hardware
        self.state = AgentState(config.agent_id, config.node_id, hardware.indices, started_at=clock())
        self.runner = make_runner(self)
        self.redis = Redis.from_url(
            config.redis_url,
            socket_connect_timeout=5,
            socket_timeout=10,
            retry=Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.05), 1),
        )
        self.writer = ReportWriter(self.redis, config.agent_id)
        self.registrations = 0
        self.metrics = AgentMetrics(config.agent_id)
        self._clock = clock
        self._session: str | None = None  # Redis run_id while reachable, None after a failure
        self._registered_at = float("-inf")

    @property
    def connected(self) -> bool:
        """True while the last heartbeat reached Redis."""
        return self._session is not None

    # ---- the life of the process -----------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set (the numbered recipe in the module docstring)."""
        writer_stop = asyncio.Event()
        writer = asyncio.create_task(self.writer.run(writer_stop), name="agent:reports")
        broker = RedisBroker(self.config.redis_url, logger=None)
        self._subscribe(broker)
        try:
            await self._until_connected(stop)
            if not stop.is_set() and await self._start_broker(broker, stop):
                log.info("agent started", agent_id=self.config.agent_id, card_type=self.hardware.card_type,
                         gpus=len(self.hardware.gpus), mode=str(self.hardware.mode))
                await self._heartbeat_until(stop)
        finally:
            with contextlib.suppress(Exception):
                await broker.stop()
            await self._stop_runs()
            writer_stop.set()
            await asyncio.gather(writer, return_exceptions=True)
            if not await self.writer.flush(timeout=5.0):
                log.warning("agent stopped with unsent reports", backlog=self.writer.backlog)
            await self.redis.aclose()
            log.info("agent stopped", agent_id=self.config.agent_id)

    def _subscribe(self, broker: RedisBroker) -> None:
        """Batch reads: handling a command only touches memory, so one XACK per batch is all the I/O."""
        reliable_batch_subscriber(
            broker,
            stream=agent_inbox(self.config.agent_id),
            group=AGENT_GROUP,
            parse=parse_command,
            consumer=f"{self.config.agent_id}@{default_consumer_name()}",
            min_idle_ms=self.config.claim_idle_ms,
            claim_interval_ms=self.config.claim_every_ms,
        )(self.on_commands)

    async def _until_connected(self, stop: asyncio.Event) -> None:
        """Tick (connect + register) until it succeeds, backing off between attempts."""
        backoff = ExponentialWithJitterBackoff(cap=5.0, base=0.2)
        failures = 0
        while not stop.is_set() and not await self.tick():
            failures += 1
            await _sleep_unless(stop, backoff.compute(failures))

    async def _start_broker(self, broker: RedisBroker, stop: asyncio.Event) -> bool:
        backoff = ExponentialWithJitterBackoff(cap=5.0, base=0.2)
        failures = 0
        while not stop.is_set():
            try:
                await broker.start()
                return True
            except Exception as exc:  # Redis went away between the tick and here: retry
                failures += 1
                log.warning("cannot start the inbox reader; retrying", error=repr(exc))
                with contextlib.suppress(Exception):
                    await broker.stop()
                await _sleep_unless(stop, backoff.compute(failures))
        return False

    async def _heartbeat_until(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _sleep_unless(stop, self.config.heartbeat_s)
            if not stop.is_set():
                await self.tick()

    async def _stop_runs(self) -> None:
        for stop in self.state.stop_all(self.config.shutdown_grace_s):
            self.runner.stop(stop)
        if self.runner.running() and not await self.runner.wait_idle(self.config.shutdown_grace_s + 5.0):
            log.warning("runs still active at shutdown", running=self.runner.running())

    # ---- heartbeat and registration ---------------------------------------------------------

    async def tick(self) -> bool:
        """One heartbeat: check the session, (re-)register when due, heartbeat. False if Redis is unreachable."""
        try:
            session = await self._redis_session()
            loop_now = asyncio.get_running_loop().time()
            if session != self._session or loop_now - self._registered_at >= self.config.register_every_s:
                await ensure_group(self.redis, agent_inbox(self.config.agent_id), AGENT_GROUP, "0")
                self.register()
                self._registered_at = loop_now
            self._session = session
        except Exception as exc:  # unreachable, restarting, loading: re-register once it is back
            if self._session is not None:
                log.warning("redis unreachable; will re-register when it is back", error=repr(exc))
            self._session = None
            self._observe(())
            return False
        self.state.note_progress(self.runner.progress_now())
        gpus = self._utilisation()
        self._observe(gpus)  # before this heartbeat joins the queue: `unsent` counts what earlier ticks left
        self.writer.send(self.state.heartbeat(gpus))
        return True

    def _observe(self, gpus: tuple) -> None:
        self.metrics.heartbeat(connected=self.connected, leases=len(self.state.leases), runs=self.runner.running(),
                               unsent=self.writer.backlog, gpus=gpus)  # fmt: skip

    def register(self) -> None:
        outgoing = self.state.registration(self.hardware.card_type, self.hardware.mode, self.hardware.gpus,
                                           time_scale=self.config.time_scale)
        self.writer.send(outgoing)
        self.registrations += 1
        self.metrics.registered()
        log.info("agent registered", agent_id=self.config.agent_id, held_leases=len(self.state.leases))

    async def _redis_session(self) -> str:
        """Redis's `run_id` (changes when the server restarts); `connected` if INFO is not allowed."""
        try:
            info = await self.redis.info("server")
        except ResponseError:  # an ACL user limited to its streams may not run INFO
            await self.redis.ping()
            return "connected"
        return str(info.get("run_id", "connected"))

    def _utilisation(self) -> tuple:
        try:
            return self.runner.utilisation()
        except Exception as exc:  # e.g. NVML hiccup: heartbeat without utilisation rather than not at all
            log.warning("cannot read GPU utilisation", error=repr(exc))
            return ()

    # ---- commands ---------------------------------------------------------------------------

    async def on_commands(self, commands: list[Command]) -> None:
        for command in commands:
            await self.on_command(command)

    async def on_command(self, command: Command) -> None:
        """Handle one inbox command (idempotent: the state remembers what it handled)."""
        decision = self.state.on_command(command, self._clock())
        self.metrics.command(decision)
        lease_id = command.data.lease_id
        if isinstance(decision, Start):
            log.info("lease granted; starting", lease_id=lease_id, task_id=command.data.task_id,
                     token=command.data.fencing_token)
            self.runner.start(decision.run.order)
        elif isinstance(decision, Stop):
            log.info("stopping run", lease_id=lease_id, kind=str(decision.kind), grace_s=decision.grace_s)
            self.runner.stop(decision)
        elif isinstance(decision, Refuse):
            log.warning("grant refused", lease_id=lease_id, reason=str(decision.reason))
            self.writer.send(decision.report)
        elif isinstance(decision, Ignore):
            log.info("command ignored", lease_id=lease_id, reason=str(decision.reason), detail=decision.detail)

    # ---- RunSink: what the runs observe -----------------------------------------------------

    def progress(self, lease_id: str, progress: float | None, output_units: float | None, message: str = "") -> None:
        self._send(self.state.on_progress(lease_id, progress, output_units, message))

    def checkpointed(self, lease_id: str, checkpoint_uri: str, progress: float | None, checksum: str | None = None) -> None:
        self._send(self.state.on_checkpoint(lease_id, checkpoint_uri, progress, checksum))

    def exited(self, lease_id: str, exit_code: int | None, output_units: float | None, error: str | None) -> None:
        outgoing = self.state.on_exit(lease_id, exit_code, output_units, error)
        log.info("run ended", lease_id=lease_id, exit_code=exit_code)
        self._send(outgoing)

    def _send(self, outgoing: Outgoing | None) -> None:
        if outgoing is not None:
            self.writer.send(outgoing)


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    await wait_until_set(stop, seconds)
