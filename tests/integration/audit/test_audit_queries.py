"""What an auditor asks the archive, against real servers: why (with the data signals of the task's
inputs), the state at a moment, and who changed what."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from services.audit.queries import UnknownTaskError, change_log, replay_at, state_json, why
from services.audit.reading import task_events
from services.ledger.service import LedgerSettings, build_spec
from shared.events import make_event
from shared.events.subjects import data_subject, task_subject
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.unit.audit.builders import T0, granted, quota, released
from tests.unit.matcher.builders import a_submission

pytestmark = pytest.mark.integration

LEDGER = build_spec(tuning=LedgerSettings(round_period_days=36500), periodic_check_s=0.2)
H = timedelta(hours=1)


def story_events() -> list:
    submission = a_submission(inputs=[{"dataset": "web-crawl", "version": "7"}])
    return [
        make_event("task.submitted", subject=task_subject("T1"), subject_seq=1, producer="intake/t", actor="user:alice",
                   occurred_at=T0, data={"task_id": "T1", "idempotency_key": "k1", "submission": submission}),
        make_event("task.readiness_changed", subject=task_subject("T1"), subject_seq=1, producer="readiness/t",
                   actor="service:readiness", occurred_at=T0 + timedelta(seconds=1),
                   data={"task_id": "T1", "ready": False, "ready_fraction": 0.0,
                         "missing_inputs": [{"dataset": "web-crawl", "version": "7"}]}),
        make_event("data.ready_signalled", subject=data_subject("web-crawl@7"), subject_seq=1, producer="intake/t",
                   actor="upstream:crawler", occurred_at=T0 + H,
                   data={"input": {"dataset": "web-crawl", "version": "7"}, "source": "run 42"}),
        make_event("task.readiness_changed", subject=task_subject("T1"), subject_seq=2, producer="readiness/t",
                   actor="service:readiness", occurred_at=T0 + H + timedelta(seconds=1),
                   data={"task_id": "T1", "ready": True, "ready_fraction": 1.0}),
        granted("L1", "T1", at=T0 + 2 * H),
        released("L1", "T1", granted_at=T0 + 2 * H, ended_at=T0 + 3 * H),
        quota("acct-1", "proj-a", 100),
        make_event("task.cancel_requested", subject=task_subject("T9"), subject_seq=1, producer="console/t",
                   actor="user:bob", occurred_at=T0 + 4 * H, data={"task_id": "T9", "reason": "wrong dataset"}),
    ]  # fmt: skip


async def carrier_lookup_plan(pool: asyncpg.Pool) -> str:
    """The plan of finding a task's usage carriers once the archive holds 4,000 more (a slice each, of other tasks;
    rows added in a transaction rolled back, so the archive is left as it was)."""
    async with pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(
                "INSERT INTO audit.events (seq, event_id, type, subject, subject_seq, producer, actor, occurred_at, body,"
                " prev_hash, hash) SELECT n, 'filler-' || n, 'usage.batch_recorded', 'usage/p', n, 'ledger/t',"
                " 'service:ledger', now(), json_build_object('data', json_build_object('slices',"
                " json_build_array(json_build_object('task_id', 'other-' || n))))::text, repeat('0', 64), repeat('0', 64)"
                " FROM generate_series(100001, 104000) AS n"
            )  # fmt: skip
            await conn.execute("ANALYZE audit.events")
            rows = await conn.fetch("EXPLAIN SELECT seq FROM audit.events WHERE type = 'usage.batch_recorded'"
                                    " AND audit.carried_task_ids(body) @> ARRAY['T1']")  # fmt: skip
            return "\n".join(row[0] for row in rows)
        finally:
            await transaction.rollback()


async def test_why_replay_at_a_moment_and_the_change_log(fresh_settings: Settings) -> None:
    events = story_events()
    async with RunningServices(fresh_settings, LEDGER) as running:
        await running.publish(*events)
        await running.wait_for_count(lambda: running.fetch("SELECT 1 FROM audit.events"), len(events) + 1)
        assert running.pool is not None
        story = await why(running.pool, "T1")
        with pytest.raises(UnknownTaskError, match="no event about task 'nope'"):
            await why(running.pool, "nope")
        during = state_json(await replay_at(running.pool, T0 + 2 * H + timedelta(minutes=30)))
        after = state_json(await replay_at(running.pool))
        changes = await change_log(running.pool)
        by_bob = await change_log(running.pool, actor="bob")
        quota_changes = await change_log(running.pool, event_type="quota.")
        since = await change_log(running.pool, since=T0 + 3 * H)
        carriers_of = {task: [e.event.type for e in await task_events(running.pool, task)] for task in ("T1", "T9")}
        plan = await carrier_lookup_plan(running.pool)

    sentences = [step["sentence"] for step in story["steps"]]
    assert sentences[1] == "waiting for data: 1 input(s) missing (0% ready): web-crawl@7"
    assert sentences[2] == "input web-crawl@7 signalled ready by upstream:crawler (run 42)"
    assert sentences[3] == "every input is ready"
    assert story["steps"][2]["actor"] == "upstream:crawler" and story["runs"][0]["end_reason"] == "succeeded"
    assert [lease["lease_id"] for lease in during["active_leases"]] == ["L1"] and after["active_leases"] == []
    assert during["as_of"] == (T0 + 2 * H).isoformat()
    assert [row["type"] for row in changes] == ["task.cancel_requested", "quota.granted"]  # newest first
    assert changes[0]["actor"] == "user:bob" and changes[0]["reason"] == "wrong dataset"
    assert changes[1]["what"].startswith("proj-a: 100 GPU-h")
    assert [row["type"] for row in by_bob] == ["task.cancel_requested"]
    assert [row["type"] for row in quota_changes] == ["quota.granted"]
    assert [row["type"] for row in since] == ["task.cancel_requested"]
    assert carriers_of == {"T1": ["task.submitted", "task.readiness_changed", "task.readiness_changed", "lease.granted",
                                  "lease.released", "usage.batch_recorded"], "T9": ["task.cancel_requested"]}  # fmt: skip
    assert "events_carried_tasks" in plan, plan  # a task's usage carriers found by the index, not by reading each
