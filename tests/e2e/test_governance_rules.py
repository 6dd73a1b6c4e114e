"""Governance rules live, on the real servers with simulated agents: idle reclaim, quotas per card
type (and the dispatcher and the ledger agree on every balance), renewal, alerts that reach a
webhook receiver, deadlines flagged and ordered."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.common.runtime import Emitter
from services.ledger.quotas import grant_quota, load_quota_status
from shared.settings import Settings
from tests.helpers.console_server import serving_console
from tests.helpers.governance import WebhookReceiver, bearer, cli_beside, issue_tokens, json_of, set_policy
from tests.helpers.system import ALL_SERVICES, RunningSystem, running_system

HOUR = 3600.0


@pytest.fixture
async def governed(fresh_settings: Settings, data_dir_factory: Callable[[], Path]) -> AsyncIterator[RunningSystem]:
    async with running_system(fresh_settings, data_dir_factory(), services=ALL_SERVICES) as system:
        yield system


def task(name: str, gpus: int, hours: float, *, project: str = "vision", card: str = "H100", **extra: Any) -> dict[str, Any]:
    return {"name": name, "project": project, "priority_class": "standard", "gpus": gpus, "estimate_gpu_hours": gpus * hours,
            "profile": "compute", "card_types": {"allow": [card]}, "checkpoint": {"interval_minutes": 1}, **extra}


def state_of(name: str, state: str) -> Callable[[RunningSystem], Any]:
    return lambda s: (v := s.task_by_name(name)) is not None and v.state.value == state and v


async def registered(system: RunningSystem, count: int) -> None:
    await system.wait_for(lambda s: len(s.of_type("node.registered")) >= count, timeout=120, what="the agents")


async def test_an_idle_lease_is_reclaimed_requeued_and_its_gpus_go_to_the_next_task(governed: RunningSystem) -> None:
    system = governed
    system.start_agent("h100-a", "H100x8", time_scale=60)
    await set_policy(system, "idle_reclaim.threshold_pct=5", "idle_reclaim.window_s=2", "idle_reclaim.grace_s=0",
                     "idle_reclaim.hold_after=2", reason="reclaim fast in the test")
    await registered(system, 1)
    await system.submit([task("idler", 8, 2.0, labels={"sim_util_pct": "0"})])
    await system.wait_for(state_of("idler", "running"), what="the idle task to run")
    await system.submit([task("worker", 8, 0.05)])  # waits for the idler's GPUs

    reclaim = await system.wait_for(lambda s: [e for e in s.of_type("lease.revoked") if e.data.reason == "reclaimed_idle"],
                                    timeout=60, what="the idle lease to be reclaimed")
    await system.wait_for(state_of("worker", "succeeded"), timeout=90, what="the next task to get the GPUs")
    held = await system.wait_for(lambda s: (v := s.task_by_name("idler")) is not None and v.reason == "repeatedly_idle"
                                 and v, timeout=120, what="the idler held for a person after its second reclaim")
    idle_hours = await system.wait_for(lambda s: _idle_gpu_hours(s, held.id), timeout=60, what="idle GPU-hours in the ledger")

    # (on a loaded machine the agent may also miss its heartbeats once: a lease_expired requeue is not a reclaim)
    requeued = [e for e in system.of_type("task.requeued") if e.data.task_id == held.id and e.data.reason == "reclaimed_idle"]
    assert len(requeued) == 2 and all(e.data.resume_from for e in requeued)  # it checkpointed before it was stopped
    worker_grant = next(e for e in system.of_type("lease.granted") if e.data.task_id == system.task_by_name("worker").id)
    first_release = next(e for e in system.of_type("lease.released") if e.data.lease_id == reclaim[0].data.lease_id)
    assert first_release.data.reason == "reclaimed_idle" and worker_grant.occurred_at >= first_release.occurred_at
    assert held.state.value == "held" and "reclaimed 2 times" in held.reason_detail
    assert idle_hours > 0
    _assert_the_rerun_resumed_from_the_checkpoint(system, held.id, requeued[0].data.resume_from)


def _assert_the_rerun_resumed_from_the_checkpoint(system: RunningSystem, task_id: str, checkpoint: str) -> None:
    """The run after the first reclaim was granted that checkpoint and the agent carried on from it: every
    checkpoint it reported lies past the resume point (a run from scratch reports its first one at
    1/120 of the work: one 1-minute interval of 2 hours), so it had less than a full run left to do."""
    resume_progress = resume_progress_of(checkpoint, task_id)
    assert resume_progress > 2 / 120  # the first run had got past its first checkpoints before it was stopped
    grants = [e for e in system.of_type("lease.granted") if e.data.task_id == task_id]
    rerun = next(g for g in grants if g.data.resume_from == checkpoint)
    assert grants.index(rerun) >= 1 and grants[0].data.resume_from is None
    started = next(e for e in system.of_type("task.started") if e.data.lease_id == rerun.data.lease_id)
    assert started.data.resumed_from == checkpoint
    progress = [e.data.progress for e in system.of_type("task.checkpointed") if e.data.lease_id == rerun.data.lease_id]
    assert progress and all(p is not None and p > resume_progress for p in progress), (resume_progress, progress)
    assert min(progress) < resume_progress + 0.5  # it carried on from there, it did not jump to the end


def resume_progress_of(checkpoint: str, task_id: str) -> float:
    from services.agent.sim_plan import resume_progress

    return resume_progress(checkpoint, task_id)


async def _idle_gpu_hours(system: RunningSystem, task_id: str) -> float | None:
    value = await system.pool.fetchval("SELECT idle_gpu_hours FROM ledger.task_totals WHERE task_id = $1", task_id)
    return float(value) if value else None


async def test_quota_per_card_type_renewal_and_balances_that_agree(governed: RunningSystem) -> None:
    system = governed
    system.start_agent("h100-a", "H100x8", time_scale=3600)
    system.start_agent("l40s-a", "L40Sx8", time_scale=3600)
    tokens = await issue_tokens(system.settings, {"ops": ("operator", None), "dev": ("submitter", "speech")})
    await registered(system, 2)
    now = datetime.now(UTC)
    with serving_console(system.settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=bearer(tokens["ops"])) as http:
            tiny_h100 = await _grant(system, "vision", 1.0, now - timedelta(days=1), now + timedelta(days=30), card="H100")
            short = await _grant(system, "speech", 500.0, now - timedelta(days=1), now + timedelta(hours=2))
            await system.wait_for(lambda s: len(s.of_type("quota.granted")) == 2, what="the grants")
            await system.submit([task("l40s-work", 4, 0.5, card="L40S"), task("h100-too-big", 8, 1.0),
                                 task("long", 8, 6.0, project="speech", card="L40S")])
            await system.wait_for(state_of("l40s-work", "succeeded"), timeout=90, what="L40S work past an H100 account")
            big = await system.wait_for(lambda s: (v := s.task_by_name("h100-too-big")) is not None
                                        and v.reason == "quota_exhausted" and v, what="H100 work held by the H100 account")
            long = await system.wait_for(lambda s: (v := s.task_by_name("long")) is not None
                                         and v.reason == "quota_expires" and v, what="the long task held by expiry")
            status = await cli_beside(url, tokens["ops"], "status", long.id, "--json")
            assert status.exit_code == 0, status.output
            quota_check = next(c for c in json_of(status)["checklist"]["checks"] if c["check"] == "quota")
            assert quota_check["passed"] is False and "expire" in quota_check["detail"]
            renewed = await cli_beside(url, tokens["ops"], "quota", "renew", short, "--valid-to",
                          (now + timedelta(days=60)).strftime("%Y-%m-%dT%H:%M:%S"), "--reason", "next quarter's budget")
            assert renewed.exit_code == 0 and "renewed quota account" in renewed.stdout, renewed.output
            refused = await http.post(f"/v1/quotas/{short}/renew", headers=bearer(tokens["dev"]), json={
                "valid_to": (now + timedelta(days=90)).isoformat(), "reason": "more please"})
            assert refused.status_code == 403
            await system.wait_for(state_of("long", "running"), timeout=90, what="the renewed long task to start")
            history = await cli_beside(url, tokens["ops"], "quota", "history", short, "--json")
            history_zh = await cli_beside(url, tokens["ops"], "quota", "history", short, "--lang", "zh")
            assert history_zh.exit_code == 0 and "每次变更" in history_zh.stdout and "续期" in history_zh.stdout, history_zh.output
            listed = await cli_beside(url, tokens["ops"], "quota", "list")
    assert "account" in big.reason_detail and "(H100 only)" in big.reason_detail
    assert "expires" in long.reason_detail
    changes = [(h["change"], h["actor"], h["reason"]) for h in json_of(history)]
    assert changes == [("grant", "user:ops", "test budget"), ("renew", "user:ops", "next quarter's budget")]
    assert listed.exit_code == 0 and "user:ops" in listed.stdout and "days left" in listed.stdout
    assert tiny_h100 and (await system.wait_for(lambda s: _balances_agree(s), timeout=60, what="balances to agree"))


async def _grant(system: RunningSystem, project: str, hours: float, start: datetime, end: datetime,
                 card: str | None = None) -> str:
    """A quota account, granted by the ledger's own command (as POST /v1/quotas does)."""
    emitter = Emitter("ledger", "console/test", "user:ops")
    async with system.pool.acquire() as conn, conn.transaction():
        event = await grant_quota(conn, emitter, project=project, gpu_hours=hours, valid_from=start, valid_to=end,
                                  card_type=card, reason="test budget")
    return event.data.account_id


async def _balances_agree(system: RunningSystem) -> bool:
    """Every account's usage: the dispatcher's count (from events) equals the ledger's (from its tables),
    once every lease has ended and its usage reached both."""
    if len(system.of_type("lease.released")) < len(system.of_type("lease.granted")):
        return False
    ledger = {s.account_id: float(s.used_gpu_hours) * HOUR for s in await load_quota_status(system.pool)}
    rows = await system.pool.fetch("SELECT account_id, used_gpu_seconds FROM dispatcher.quota_accounts")
    dispatcher = {row["account_id"]: row["used_gpu_seconds"] for row in rows}
    return set(ledger) == set(dispatcher) and any(ledger.values()) and all(
        abs(ledger[a] - dispatcher[a]) < 1e-3 for a in ledger)


async def test_an_expiring_quota_alert_for_core_work_reaches_a_webhook(governed: RunningSystem) -> None:
    system = governed
    system.start_agent("h100-a", "H100x8", time_scale=3600)
    tokens = await issue_tokens(system.settings, {"ops": ("operator", None)})
    now = datetime.now(UTC)
    await registered(system, 1)  # the services have started (and migrated) before the console starts beside them
    with WebhookReceiver(fail_first=1) as hook, serving_console(system.settings) as url:
        await set_policy(system, f"alerts.sinks=[{{kind: webhook, url: '{hook.url}', kinds: [quota_at_risk]}},"
                                 " {kind: log}, {kind: console}]", "alerts.webhook_backoff_s=0.5",
                         reason="the planners' channel")
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=bearer(tokens["ops"])) as http:
            account = await _grant(system, "llm", 1000.0, now - timedelta(days=1), now + timedelta(days=10))
            await system.wait_for(lambda s: s.of_type("quota.granted"), what="the grant")
            await system.submit([task("blocker", 8, 20.0, project="other")])
            await system.wait_for(state_of("blocker", "running"), what="the blocker to hold every GPU")
            await system.submit([task("core-train", 8, 1.0, project="llm") | {"priority_class": "core"}])
            delivered = await system.wait_for(lambda s: [b for b in hook.bodies if b["kind"] == "quota_at_risk"],
                                              timeout=90, what="the webhook to receive the alert")
            digest = (await http.get("/v1/alerts/digest")).json()
            banner = (await http.get("/v1/alerts")).json()
    alert = delivered[0]
    assert alert["task_id"] == system.task_by_name("core-train").id and alert["account_id"] == account
    assert "within 15 days of the expiry of quota account" in alert["sentence"] and alert["project"] == "llm"
    assert hook.refused == 1  # the first POST failed; the retry delivered it
    entry = next(a for a in digest["alerts"] if a["alert_id"] == alert["alert_id"])
    assert entry["deliveries"][0]["status"] == "delivered" and entry["deliveries"][0]["attempts"] == 2
    assert any(a.get("alert_id") == alert["alert_id"] for a in banner)


async def test_deadlines_are_flagged_and_go_first_within_their_class(governed: RunningSystem) -> None:
    system = governed
    system.start_agent("h100-a", "H100x8", time_scale=600)
    await registered(system, 1)
    await system.submit([task("running", 8, 3.0)])  # 18 s at 600x: the next three queue behind it
    await system.wait_for(state_of("running", "running"), what="the first task to run")
    soon = (datetime.now(UTC) + timedelta(hours=6)).isoformat()
    hopeless = (datetime.now(UTC) + timedelta(minutes=4)).isoformat()
    await system.submit([task("plain", 8, 0.2, priority=5), task("urgent", 8, 0.2, deadline=soon),
                         task("fifty-gpu-hours", 8, 6.25, deadline=hopeless)])
    flagged = await system.wait_for(lambda s: [e for e in s.of_type("task.deadline_endangered")
                                               if e.data.task_id == s.task_by_name("fifty-gpu-hours").id],
                                    timeout=60, what="the hopeless deadline flagged")
    await system.wait_for(state_of("plain", "succeeded"), timeout=240, what="the plain task to run")
    order = [e.data.task_id for e in system.of_type("lease.granted")]
    urgent, plain = system.task_by_name("urgent").id, system.task_by_name("plain").id
    assert order.index(urgent) < order.index(plain)  # earlier deadline first within the class, despite priority 5
    assert "after its deadline" in flagged[0].data.detail
    assert not [e for e in system.of_type("task.deadline_endangered") if e.data.task_id in (urgent, plain)]
