"""The daily alert digest as the ledger runs it, against real Redis, PostgreSQL and S3 and a webhook
receiver started by the test: at the policy's time of day (09:00 Asia/Shanghai) one digest with the
last 24 hours' alerts reaches the webhook (after one refused POST: retried), a restarted ledger does
not send that day's again, and the next day's goes the next day. The ledger's clock is moved, no
waiting a day."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncio

import pytest

from services.config.service import ConfigServiceSettings, DemoSettings, make_spec
from services.config.store import ConfigStore
from services.ledger.alerting import save_alerts
from services.ledger.service import build_spec
from shared.alerts import Alert, AlertKind
from shared.config import POLICY
from shared.config.governance import AlertsSection
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.console_server import first_admin, serving_console
from tests.helpers.governance import WebhookReceiver, cli
from tests.helpers.moved_clock import MovedClock
from tests.helpers.running_services import RunningServices

pytestmark = pytest.mark.integration


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


ALERTS = [
    Alert("digest-idle", AlertKind.IDLE_RECLAIM, "task T1 lost lease L1: its GPUs stayed idle too long; requeued",
          at("2031-03-14T20:00"), "task.requeued", task_id="T1", project="research"),
    Alert("digest-failed", AlertKind.TASK_FAILED, "task T2 failed", at("2031-03-14T21:00"), "task.failed", task_id="T2"),
    Alert("digest-expiring", AlertKind.QUOTA_EXPIRING, "quota account demo-vision expires in 12 days",
          at("2031-03-14T22:00"), "quota.expiring", account_id="demo-vision", project="vision"),
    Alert("digest-old", AlertKind.IDLE_RECLAIM, "an idle reclaim two days ago", at("2031-03-13T12:00"), "task.requeued"),
]  # fmt: skip
"""Three in the 24 hours before 09:00 of 2031-03-15 in Shanghai (01:00 UTC), one before them."""


async def test_the_daily_digest_reaches_a_webhook_once_a_day_across_a_restart(fresh_settings: Settings) -> None:
    clock = MovedClock(at("2031-03-15T00:30"))  # 08:30 in Shanghai: not yet
    config = make_spec(ConfigServiceSettings(daily=False), demo=DemoSettings(time_scale=None))
    with WebhookReceiver(fail_first=1) as hook:
        async with RunningServices(fresh_settings, config) as services:
            assert await services.wait_until(lambda: _policy_seeded(services))
            async with open_object_store(fresh_settings) as objects:
                store = ConfigStore(services.pool, objects, "config/test")  # type: ignore[arg-type]
                await store.set(POLICY, [
                    f"alerts.sinks=[{{kind: webhook, url: '{hook.url}', kinds: [idle_reclaim, quota_expiring]}}, {{kind: log}}]",
                    "alerts.webhook_backoff_s=0.2", "alerts.digest={at: '09:00', timezone: Asia/Shanghai}",
                ], base=None, actor="user:test", reason="the planners' channel gets the morning digest")  # fmt: skip

            def ledger() -> None:
                services.start_service("ledger", build_spec(digest_check_s=0.05, webhook_every_s=0.05, clock=clock))

            async def checked(times: int) -> None:  # the digest loop asked the clock `times` more times
                asked = clock.asked
                assert await services.wait_until(lambda: _true(clock.asked >= asked + times))

            ledger()
            assert await services.wait_until(lambda: _migrated(services))
            async with services.pool.acquire() as conn, conn.transaction():  # type: ignore[union-attr]
                await save_alerts(conn, ALERTS, AlertsSection(sinks=()))  # stored, delivered to nobody by themselves
            await checked(5)
            assert hook.bodies == [] and await services.fetch("SELECT day FROM ledger.alert_digests") == []

            clock.now = at("2031-03-15T01:05")  # 09:05 in Shanghai
            assert await services.wait_until(lambda: _true(len(hook.bodies) >= 1))
            # recorded as delivered (a stop between the 2xx and that commit POSTs it again: at least once)
            assert await services.wait_until(lambda: _digest_delivered(services))

            await services.stop_service("ledger")  # a restart, later the same day (17:00 in Shanghai)
            clock.now = at("2031-03-15T09:00")
            ledger()
            await checked(10)
            assert len(hook.bodies) == 1

            clock.now = at("2031-03-16T01:00")  # 09:00 of the 16th: the next day's
            assert await services.wait_until(lambda: _true(len(hook.bodies) >= 2))
            await checked(10)
            sent = await services.fetch("SELECT day, alerts, counts FROM ledger.alert_digests ORDER BY day")
            deliveries = await services.fetch("SELECT day, status, attempts FROM ledger.digest_deliveries ORDER BY day")
            with serving_console(fresh_settings) as url:  # what `cardflow alerts` shows of it
                root = await first_admin(fresh_settings)
                shown = await asyncio.to_thread(cli, url, root, "alerts", "--since", "2031-03-14T00:00")
                shown_zh = await asyncio.to_thread(cli, url, root, "alerts", "--since", "2031-03-14T00:00", "--lang", "zh")

    first, second = hook.bodies[:2]
    assert len(hook.bodies) == 2
    assert (first["kind"], first["day"], first["timezone"]) == ("digest", "2031-03-15", "Asia/Shanghai")
    # the webhook sink wants idle_reclaim and quota_expiring: not the failure; not the alert of two days ago
    assert [a["alert_id"] for a in first["alerts"]] == ["digest-expiring", "digest-idle"]
    assert first["counts"] == {"idle_reclaim": 1, "quota_expiring": 1} and first["total"] == 2
    assert first["since"] == "2031-03-14T01:05:00+00:00" and first["until"] == "2031-03-15T01:05:00+00:00"
    assert (second["day"], second["total"]) == ("2031-03-16", 0)
    assert hook.refused == 1  # the first POST was refused; the retry delivered it
    assert [(str(r["day"]), r["alerts"]) for r in sent] == [("2031-03-15", 3), ("2031-03-16", 0)]  # the log sink: all kinds
    assert [(str(r["day"]), r["status"]) for r in deliveries] == [("2031-03-15", "delivered"), ("2031-03-16", "delivered")]
    assert deliveries[0]["attempts"] == 2
    assert shown.exit_code == 0, shown.output
    assert "daily digest: pushed at 09:00 Asia/Shanghai to the webhook and log sinks; last: 2031-03-16" in shown.output
    assert f"✓ {hook.url}" in shown.output and "digest-expiring" not in shown.output  # alert ids are not shown, sentences are
    assert "quota account demo-vision expires in 12 days" in shown.output
    assert "每日摘要：每天 09:00（Asia/Shanghai）推送到 webhook 和日志；最近一次：2031-03-16" in shown_zh.output


async def _policy_seeded(services: RunningServices) -> bool:
    return bool(await services.fetch("SELECT 1 FROM config.versions WHERE name = 'policy'"))


async def _migrated(services: RunningServices) -> bool:
    return (await services.fetch("SELECT to_regclass('ledger.alert_digests') IS NOT NULL AS ok"))[0]["ok"]


async def _digest_delivered(services: RunningServices) -> bool:
    return bool(await services.fetch("SELECT 1 FROM ledger.digest_deliveries WHERE status = 'delivered'"))


async def _true(value: bool) -> bool:
    return value
