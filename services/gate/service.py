"""`cardflow service gate`: the one writer of `cf:events` (services.gate.forwarder does the work).

It has no schema of its own and emits nothing; it runs under the shared service runtime for its
supervision, retention sweep (it trims the producer streams once forwarded) and metrics. An
instance that does not hold the gate lock, or whose Redis fails, waits `IDLE_S` before trying again;
a stopped instance gives the lock up, so the next one need not wait for its TTL.
"""

from __future__ import annotations


from redis.exceptions import RedisError

from services.common.runtime import ServiceContext, ServiceSpec
from services.gate.forwarder import Gate
from shared.event_wait import wait_until_set
from shared.logging import get_logger

log = get_logger(__name__)

IDLE_S = 1.0


async def setup(ctx: ServiceContext) -> None:
    gate = Gate(ctx.redis)
    ctx.state["gate"] = gate
    ctx.resources.push_async_callback(_give_up_lock, gate)  # after the loops ended, before Redis closes

    async def forward(_: ServiceContext) -> None:
        try:
            if await gate.forward_once() or gate.leading:
                return
        except Exception:  # infrastructure loop (Redis down, restarting): log, back off, go on
            if ctx.stop.is_set():
                return  # shutting down: the read in flight was cut off
            log.exception("gate step failed; retrying")
            gate.leading, gate.recovering = False, True
        await wait_until_set(ctx.stop, IDLE_S)

    ctx.every(0.0, forward, name="forward")


async def _give_up_lock(gate: Gate) -> None:
    try:
        await gate.release()
    except (RedisError, OSError):  # Redis gone at stop: the lock expires after its TTL instead
        log.warning("gate lock not released at stop; the next instance waits for its TTL", exc_info=True)


SPEC = ServiceSpec(name="gate", schema=None, migrations=None, setup=setup)
