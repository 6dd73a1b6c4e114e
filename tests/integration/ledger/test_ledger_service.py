"""The ledger service against real Redis and PostgreSQL: exact usage, no double counting, quota alerts once,
and the `cardflow ledger` / `cardflow quota` commands over what it recorded."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from services.common.runtime import Emitter
from services.console.series import period_totals
from services.ledger.batch import fold_batch
from services.ledger.quotas import raise_due_alerts
from services.ledger.service import build_spec
from services.ledger.store import LeaseOpenedConcurrentlyError, save_effects
from shared.cards import load_catalog
from shared.events import UsageRecorded
from shared.settings import Settings
from tests.helpers.console_server import first_admin, issue_token, serving_console
from tests.helpers.delivery_support import REPO_ROOT
from tests.helpers.running_services import RunningServices
from tests.unit.ledger.builders import T0, checkpointed, granted, matched, released, renewed, submitted, succeeded

pytestmark = pytest.mark.integration

PRICE = {card.card_type: Decimal(str(card.price_per_gpu_hour)) for card in load_catalog()}


def expected_cost(gpus: int, start: datetime, end: datetime, card_type: str) -> tuple[Decimal, Decimal]:
    """GPU-seconds and cost computed from the event times: duration x GPUs x price, cost to 1e-6."""
    gpu_seconds = gpus * Decimal(str((end - start).total_seconds()))
    return gpu_seconds, (gpu_seconds * PRICE[card_type] / 3600).quantize(Decimal("0.000001"))


async def cardflow(api: tuple[str, str], *args: str) -> str:
    """Run the `cardflow` CLI against the console API `api` = (url, token); its stdout (fails on a non-zero exit)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env |= {"CARDFLOW_API_URL": api[0], "CARDFLOW_TOKEN": api[1], "COLUMNS": "250"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, cwd=REPO_ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def lease_row(running: RunningServices, lease_id: str) -> dict[str, Any] | None:
    rows = await running.fetch("SELECT * FROM ledger.lease_usage WHERE lease_id = $1", lease_id)
    return dict(rows[0]) if rows else None


async def wait_closed(running: RunningServices, lease_id: str) -> dict[str, Any]:
    async def closed() -> bool:
        row = await lease_row(running, lease_id)
        return row is not None and row["closed_at"] is not None

    assert await running.wait_until(closed), f"lease {lease_id} was not closed"
    row = await lease_row(running, lease_id)
    assert row is not None
    return row


ROUND_MARKS = frozenset({"closed_round_id", "round_id", "finished_round_id"})
"""Columns the periodic round close (every PERIODIC_CHECK_S, 30 s) sets on rows of a past round, on its own clock."""


def without_round_marks(row: Any) -> dict[str, Any]:
    """A ledger row without `ROUND_MARKS`: what folding events wrote."""
    assert row is not None
    return {column: value for column, value in dict(row).items() if column not in ROUND_MARKS}


def usage_of(events: list[Any], lease_id: str) -> list[Any]:
    return [e for e in events if isinstance(e, UsageRecorded) and e.data.lease_id == lease_id]


async def test_granted_renewed_released_costs_duration_times_price_once(fresh_settings: Settings) -> None:
    renewed_at = T0 + timedelta(seconds=30, microseconds=500_000)
    ended_at = T0 + timedelta(seconds=95, microseconds=250_001)
    lease_events = [granted("L1", "T1", gpus=2), renewed("L1", "T1", at=renewed_at), released("L1", "T1", ended_at=ended_at)]
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(submitted("T1"), *lease_events)
        first = await wait_closed(running, "L1")
        await running.publish(*lease_events[1:])  # redelivered, as after a consumer crash
        await running.publish(granted("L2", "T1", gpus=1), released("L2", "T1", ended_at=T0 + timedelta(seconds=9), gpus=1))
        await wait_closed(running, "L2")
        again = await lease_row(running, "L1")
        increments = await running.fetch("SELECT * FROM ledger.usage_increments WHERE lease_id = 'L1' ORDER BY from_at")
        events = await running.wait_for_events("usage.recorded", len(increments) + 1)  # and L2's one

    gpu_seconds, cost = expected_cost(2, T0, ended_at, "H100")
    assert (first["gpu_seconds"], first["cost"]) == (gpu_seconds, cost)
    assert first["project"] == "proj-a" and first["price_per_gpu_hour"] == PRICE["H100"]
    assert (first["opened_at"], first["accounted_until"], first["closed_at"]) == (T0, ended_at, ended_at)
    # T0's round is long over: the round close may mark the lease between the two reads on a loaded machine
    assert without_round_marks(again) == without_round_marks(first)
    # one slice per lease per ledger batch: the renewal's and the end's, or both joined if one batch held them
    usage = usage_of(events, "L1")
    assert [row["to_at"] for row in increments] in ([renewed_at, ended_at], [ended_at])
    assert sum(row["gpu_seconds"] for row in increments) == gpu_seconds and sum(row["cost"] for row in increments) == cost
    assert usage[0].data.gpu_seconds == pytest.approx(float(increments[0]["gpu_seconds"]))
    assert [(e.event_id, e.data.to_at) for e in usage] == [(row["event_id"], row["to_at"]) for row in increments]


LEDGER_STATE = {
    "lease_usage": "SELECT * FROM ledger.lease_usage ORDER BY lease_id",
    "usage_increments": "SELECT * FROM ledger.usage_increments ORDER BY lease_id, from_at",
    "task_output": "SELECT * FROM ledger.task_output ORDER BY task_id, lease_id",
    "flagged_output": "SELECT * FROM ledger.flagged_output ORDER BY task_id, lease_id",
    "tasks": "SELECT * FROM ledger.tasks ORDER BY task_id",
    "task_matches": "SELECT * FROM ledger.task_matches ORDER BY task_id",
}


async def ledger_state(running: RunningServices) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows without their round marks (the round close may run between two reads on a loaded machine)."""
    return {table: [without_round_marks(row) for row in await running.fetch(sql)] for table, sql in LEDGER_STATE.items()}


async def test_only_events_unsafe_to_fold_twice_take_an_inbox_row_and_a_redelivery_of_all_changes_nothing(
    fresh_settings: Settings,
) -> None:
    ended = T0 + timedelta(seconds=95)
    # T1 is matched twice at the same instant (a rematch): the matcher's second match is the one to keep
    run = [submitted("T1"), matched("T1", "H100", seq=1), matched("T1", "A100", seq=2), granted("L1", "T1"),
           checkpointed("T1", "L1", 3), renewed("L1", "T1", at=T0 + timedelta(seconds=30)),
           released("L1", "T1", ended_at=ended), succeeded("T1", "L1", 7)]  # fmt: skip
    flagged = [submitted("T2"), granted("L2", "T2", gpus=1), checkpointed("T2", "L2", 4),
               released("L2", "T2", ended_at=ended, gpus=1), succeeded("T2", "L2", 5, flags=("implausibly_early_success",))]  # fmt: skip
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(*run, *flagged)
        await wait_closed(running, "L1")
        await wait_closed(running, "L2")
        assert await running.wait_until(lambda: running.fetch("SELECT 1 FROM ledger.flagged_output"))
        inbox = {row["event_id"] for row in await running.fetch("SELECT event_id FROM ledger.inbox WHERE consumer = 'ledger'")}
        before = await ledger_state(running)
        await running.publish(*run, *flagged)  # redelivered, as after a consumer crash before its ack
        await running.publish(granted("L3", "T1", gpus=1), released("L3", "T1", ended_at=T0 + timedelta(seconds=9), gpus=1))
        await wait_closed(running, "L3")  # the ledger has folded the redelivery too
        await running.publish(run[1])  # the older match alone, after the newer one was stored
        await running.publish(granted("L4", "T1", gpus=1), released("L4", "T1", ended_at=T0 + timedelta(seconds=9), gpus=1))
        await wait_closed(running, "L4")
        after = await ledger_state(running)
        usage = await running.events("usage.recorded")

    assert inbox == {run[4].event_id, flagged[2].event_id, flagged[4].event_id}  # the checkpoints and the flagged success
    markers = ("L3", "L4")
    assert [row for row in after["lease_usage"] if row["lease_id"] not in markers] == before["lease_usage"]
    assert [row for row in after["usage_increments"] if row["lease_id"] not in markers] == before["usage_increments"]
    assert [row for row in after["task_output"] if row["lease_id"] not in markers] == before["task_output"]
    assert (after["flagged_output"], after["tasks"]) == (before["flagged_output"], before["tasks"])
    assert after["task_matches"] == before["task_matches"] and before["task_matches"][0]["chosen"] == "A100"
    l1_slices = len([row for row in before["usage_increments"] if row["lease_id"] == "L1"])  # 1 or 2, by batching
    assert [len(usage_of(usage, lease_id)) for lease_id in ("L1", "L2", "L3")] == [l1_slices, 1, 1]
    assert [(row["task_id"], row["output_units"]) for row in before["task_output"]] == [("T1", Decimal(7))]


async def test_a_lease_opened_by_two_deliveries_at_once_is_written_by_the_first_and_the_second_fails(
    fresh_settings: Settings,
) -> None:
    catalog, emitter = load_catalog(), Emitter("ledger", "ledger/test", "service:ledger")
    first = fold_batch([granted("L5", "T5")], catalog, {}, {"T5": "proj-a"})
    second = fold_batch([granted("L5", "T5"), renewed("L5", "T5", at=T0 + timedelta(seconds=30))], catalog, {}, {"T5": "proj-a"})
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(submitted("T5"))
        assert await running.wait_until(lambda: running.fetch("SELECT 1 FROM ledger.tasks WHERE task_id = 'T5'"))
        assert running.pool is not None
        async with running.pool.acquire() as one, running.pool.acquire() as other:
            committed, racing = one.transaction(), other.transaction()
            await committed.start()
            await save_effects(one, emitter, first)
            await racing.start()
            late = asyncio.create_task(save_effects(other, emitter, second))
            await committed.commit()
            with pytest.raises(LeaseOpenedConcurrentlyError, match="L5"):
                await late
            await racing.rollback()
        row = await lease_row(running, "L5")

    assert row is not None and (row["accounted_until"], row["gpu_seconds"]) == (T0, 0)


async def test_quota_grant_lists_every_problem_with_its_field(fresh_settings: Settings) -> None:
    ops = await issue_token(fresh_settings, await first_admin(fresh_settings), "ops", "operator")
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    with serving_console(fresh_settings) as url:
        env |= {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": ops, "COLUMNS": "300"}

        async def grant(*args: str) -> tuple[int, str]:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "services.cli.main", "quota", "grant", "proj-q", *args, "--reason", "r", cwd=REPO_ROOT,
                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
            _, err = await process.communicate()
            return process.returncode or 0, " ".join(err.decode().split())

        code, both = await grant("--gpu-hours", "0", "--valid-from", "2026-12-31", "--valid-to", "2026-12-01")
        card_code, card = await grant("--gpu-hours", "5", "--valid-from", "2026-12-01", "--valid-to", "2026-12-31",
                                      "--card-type", "H200X")  # fmt: skip
    assert code == 1 and "gpu_hours: Input should be greater than 0" in both, both
    assert "valid_to: Value error, must be after valid_from (2026-12-31T00:00:00+00:00)" in both, both
    assert card_code == 1 and "card_type: unknown card type 'H200X'; the catalog has" in card and "H100" in card, card


async def test_quota_threshold_alert_is_raised_once(fresh_settings: Settings) -> None:
    valid_to = (datetime.now(UTC) + timedelta(days=60)).strftime("%Y-%m-%d")
    ops = await issue_token(fresh_settings, await first_admin(fresh_settings), "ops", "operator")
    async with RunningServices(fresh_settings, build_spec(quota_check_interval_s=0.1)) as running:
        with serving_console(fresh_settings) as url:
            api = (url, ops)
            out = await cardflow(api, "quota", "grant", "proj-q", "--gpu-hours", "1", "--valid-from", "2024-12-01",
                                 "--valid-to", valid_to, "--reason", "pilot budget")  # fmt: skip
            assert "granted 1 GPU-hours to proj-q" in out
            (grant,) = await running.wait_for_events("quota.granted", 1)
            assert grant.data.project == "proj-q" and grant.data.thresholds == (0.8, 0.95)
            assert (grant.actor, grant.data.reason) == ("user:ops", "pilot budget")

            end_a = T0 + timedelta(minutes=25)  # 2 GPUs x 25 min = 0.833 GPU-hours: past 80 %
            await running.publish(submitted("TQ", project="proj-q"), granted("LA", "TQ"), released("LA", "TQ", ended_at=end_a))
            (crossed,) = await running.wait_for_events("quota.threshold_crossed", 1)
            assert crossed.data.threshold == 0.8 and crossed.data.used_gpu_hours == pytest.approx(50 / 60)

            async with running.pool.acquire() as conn, conn.transaction():  # another instance checking: nothing due
                assert await raise_due_alerts(conn, Emitter("ledger", "tests/1", "test:ledger"), datetime.now(UTC)) == []

            end_b = end_a + timedelta(minutes=5)  # + 0.167 GPU-hours: 100 %
            await running.publish(granted("LB", "TQ", at=end_a), released("LB", "TQ", granted_at=end_a, ended_at=end_b))
            crossings = await running.wait_for_events("quota.threshold_crossed", 2)
            listed = json.loads(await cardflow(api, "quota", "list", "--json"))
            granted_zh = await cardflow(api, "quota", "grant", "proj-z", "--gpu-hours", "2", "--valid-from", "2024-12-01",
                                        "--valid-to", valid_to, "--reason", "试点", "--lang", "zh")  # fmt: skip
            account_z = granted_zh.split("账户")[-1].strip()
            adjusted_zh = await cardflow(api, "quota", "adjust", account_z, "--gpu-hours", "1", "--reason", "加一点", "--lang", "zh")
            history_zh = await cardflow(api, "quota", "history", account_z, "--lang", "zh")

    assert "已向 proj-z 授予 2 GPU 小时配额" in granted_zh, granted_zh
    assert f"配额账户 {account_z} 已调整：共 3 GPU 小时" in adjusted_zh, adjusted_zh
    assert "每次变更" in history_zh and "授予" in history_zh and "调整" in history_zh and "加一点" in history_zh, history_zh
    assert [e.data.threshold for e in crossings] == [0.8, 0.95]
    (account,) = listed
    assert account["used_gpu_hours"] == pytest.approx(1.0) and account["alerts_raised"] == ["80%", "95%"]
    assert account["remaining_gpu_hours"] == 0


async def test_ledger_command_totals_cost_and_output(fresh_settings: Settings) -> None:
    end = T0 + timedelta(hours=1)
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(
            submitted("TO", output_unit="tokens"), granted("LO", "TO", gpus=4, card_type="A10"),
            checkpointed("TO", "LO", 500_000, at=T0 + timedelta(minutes=10)),
            released("LO", "TO", ended_at=end, card_type="A10", gpus=4), succeeded("TO", "LO", 2_000_000, at=end),
        )  # fmt: skip
        await wait_closed(running, "LO")

        async def output_recorded() -> bool:
            return bool(await running.fetch("SELECT 1 FROM ledger.task_output WHERE task_id = 'TO'"))

        assert await running.wait_until(output_recorded)
        reader = await issue_token(fresh_settings, await first_admin(fresh_settings), "finance", "auditor")
        with serving_console(fresh_settings) as url:
            by_task = json.loads(await cardflow((url, reader), "ledger", "--by", "task", "--json"))
            by_card = json.loads(await cardflow((url, reader), "ledger", "--by", "card", "--json"))
            table = await cardflow((url, reader), "ledger", "--by", "project")
            half = (T0 + timedelta(minutes=30)).isoformat()
            later = json.loads(await cardflow((url, reader), "ledger", "--by", "task", "--since", half, "--json"))
            earlier = json.loads(await cardflow((url, reader), "ledger", "--by", "project", "--until", half, "--json"))
            csv_text = await cardflow((url, reader), "ledger", "--by", "card", "--csv")
        # the console's "last N days" per project counts output as the window does: from half time on, 1,500,000
        since_half = await period_totals(running.pool, T0 + timedelta(days=1, minutes=30), days=1)

    _, cost = expected_cost(4, T0, end, "A10")
    # a window takes the part of each accounted interval inside it, and the output reported in it above what the
    # run had counted: the checkpoint's 500,000 before half time, the success's further 1,500,000 after it
    assert [(r["task_id"], r["gpu_hours"], r["output_units"]) for r in later] == [("TO", 2.0, 1_500_000)]
    assert later[0]["cost"] == pytest.approx(float(cost) / 2, abs=1e-6)
    assert [(r["project"], r["gpu_hours"], r["output_units"]) for r in earlier] == [("proj-a", 2.0, 500_000)]
    assert [(p["project"], p["output_units"]) for p in since_half["projects"]] == [("proj-a", 1_500_000)]
    assert earlier[0]["cost_per_output_unit"] == pytest.approx(float(cost) / 2 / 500_000)
    assert {row["currency"] for row in by_task + later + earlier} == {load_catalog().currency}
    assert "GPU-hours (real)" in table and f"cost ({load_catalog().currency})" in table and "real (wall-clock) hours" in table
    header, line = csv_text.splitlines()
    assert header == "card_type,name,gpu_hours,idle_gpu_hours,cost,currency,output_units,output_unit,cost_per_output_unit,running"
    assert line.startswith(f"A10,,4.0,,{by_card[0]['cost']},{load_catalog().currency},2000000")  # idle: per task and project
    (task,) = by_task
    assert task["task_id"] == "TO" and task["gpu_hours"] == 4.0 and task["cost"] == pytest.approx(float(cost))
    assert task["output_units"] == 2_000_000 and task["output_unit"] == "tokens"
    assert task["cost_per_output_unit"] == pytest.approx(float(cost) / 2_000_000)
    assert by_card == [{**by_card[0], "card_type": "A10", "gpu_hours": 4.0, "output_units": 2_000_000}]
    assert "proj-a" in table and "tokens" in table
