"""A round's capacity against real PostgreSQL and S3 with no archiver keeping up: counted from the nodes'
alive spans the ledger keeps itself (`ledger.node_spans`), and, for a node registered before it kept them,
from the archived registration and the loss it kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from redis.asyncio import Redis

from services.audit.archive import archivable, archive_events
from services.common.runtime import Emitter
from services.ledger.rounds import close_round
from services.ledger.service import LedgerSettings, build_spec
from shared.delivery.entry_steps import Entry
from shared.delivery.wire import ensure_group, wire_fields
from shared.events import Envelope, utcnow
from shared.names import AUDIT_GROUP, EVENTS_STREAM
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.running_services import RunningServices
from tests.unit.matcher.builders import T0, lost, registered

pytestmark = pytest.mark.integration

LEDGER = build_spec(tuning=LedgerSettings(round_period_days=36500), periodic_check_s=0.2)  # never closes by itself
EMITTER = Emitter("ledger", "console/test", "user:planner")
PERIOD = timedelta(days=36500)
PAST_EVERY_ENTRY = f"{2**64 - 1}-0"
"""A stream id after every entry: a consumer group started there reads none of them."""


async def archive(running: RunningServices, *events: Envelope) -> None:
    """Archive `events` as the archiver would have (it reads nothing here)."""
    assert running.pool is not None
    entries = [Entry(f"0-{i + 1}", {k.encode(): v.encode() for k, v in wire_fields(e).items()}) for i, e in enumerate(events)]
    async with running.pool.acquire() as conn, conn.transaction():
        await archive_events(conn, [archivable(entry) for entry in entries])


async def test_a_node_lost_mid_round_counts_only_its_alive_time_though_its_loss_is_not_archived(
    fresh_settings: Settings,
) -> None:
    # The archiver's group starts after every entry: it archives nothing (as far behind as it can be). The
    # test archives N1's registration itself (the archiver reached it, not N1's loss 30 minutes later), and
    # N3's, which the ledger never consumes (consumed before it kept spans): N3's loss is the ledger's.
    # Before, the round read only the archive: N1 and N3 alive to the round's end.
    n1_up, n1_gone = registered("n1", "H100", 8, at=T0), lost("n1", at=T0 + timedelta(minutes=30))
    n2_up = registered("n2", "L40S", 4, at=T0)
    n3_up, n3_gone = registered("n3", "A100", 4, at=T0), lost("n3", at=T0 + timedelta(minutes=45))
    redis = Redis.from_url(fresh_settings.redis_url or "")
    try:
        await ensure_group(redis, EVENTS_STREAM, AUDIT_GROUP, start_id=PAST_EVERY_ENTRY)
    finally:
        await redis.aclose()
    async with RunningServices(fresh_settings, LEDGER) as running, open_object_store(fresh_settings) as store:
        assert running.pool is not None
        await running.publish(n1_up, n2_up, n1_gone, n3_gone)

        async def kept() -> bool:
            return len(await running.fetch("SELECT 1 FROM ledger.node_spans WHERE lost_at IS NOT NULL")) == 2

        assert await running.wait_until(kept)
        await archive(running, n1_up, n3_up)
        archived = await running.fetch("SELECT type, event_id FROM audit.events ORDER BY seq")
        async with running.pool.acquire() as conn, conn.transaction():
            closed = await close_round(conn, store, EMITTER, actor="user:planner", note="capacity", now=utcnow(),
                                       period=PERIOD)  # fmt: skip

    assert [(r["type"], r["event_id"]) for r in archived] == [("node.registered", n1_up.event_id),
                                                               ("node.registered", n3_up.event_id)]  # fmt: skip
    capacity = {row["card_type"]: row["capacity_gpu_hours"] for row in closed.report["idle_by_card"]}
    alive_n2 = (closed.ends_at - T0) / timedelta(hours=1)
    assert capacity == {"H100": pytest.approx(8 * 0.5), "A100": pytest.approx(4 * 0.75), "L40S": pytest.approx(4 * alive_n2)}
