"""Rounds against real PostgreSQL and S3: a round closed by hand reconciles with the ledger to the
GPU-second and with lease durations x prices, its report lands in the reports bucket as CSV, JSON
and HTML, its note is amended with history, and two rounds compare; flagged successes are listed
apart (their output counted nowhere) in PostgreSQL, the bucket, the console page and the CLI."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.common.runtime import Emitter
from services.ledger.reports import Grouping, ledger_rows
from services.ledger.reviews import review_matches
from services.ledger.rounds import RoundError, amend_note, close_round, compare_rounds, list_rounds, load_round
from services.ledger.service import LedgerSettings, build_spec
from shared.cards import load_catalog
from shared.events import TaskMatched, make_event, utcnow
from shared.events.subjects import task_subject
from shared.names import REPORTS_BUCKET
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.console_server import console_client, first_admin, serving_console
from tests.helpers.running_services import RunningServices
from tests.unit.ledger.builders import T0, checkpointed, flag_cleared, granted, released, renewed, submitted, succeeded
from tests.unit.matcher.builders import a_submission

pytestmark = pytest.mark.integration

LEDGER = build_spec(tuning=LedgerSettings(round_period_days=36500), periodic_check_s=0.2)  # never closes by itself
PRICE = {card.card_type: Decimal(str(card.price_per_gpu_hour)) for card in load_catalog()}
EMITTER = Emitter("ledger", "console/test", "user:planner")
PERIOD = timedelta(days=36500)


def task(task_id: str, project: str, scenario: str) -> object:
    event = submitted(task_id)
    submission = a_submission(project=project, labels={"scenario": scenario}, output_unit="samples")
    return event.model_copy(update={"data": event.data.model_copy(update={"submission": submission})})


LEASES = [  # lease, task, project, scenario, card, gpus, start offset (min), minutes held
    ("L1", "T1", "llm", "pretrain", "H100", 2, 0, 90),
    ("L2", "T2", "llm", "eval", "L40S", 1, 10, 37),
    ("L3", "T3", "vision", "pretrain", "H100", 4, 5, 61),
]


def matched(task_id: str, card: str, minutes: int) -> TaskMatched:
    """A match whose estimate for `card` is `minutes` (the tasks below all run ~`minutes` + 7 s)."""
    ranking = [{"card_type": card, "est_runtime_s": minutes * 60.0, "est_cost": 1.0}]
    if card == "H100":  # an alternative estimated as fast for less: the review calls H100 oversized
        ranking.append({"card_type": "A100", "est_runtime_s": minutes * 60.0, "est_cost": 0.01})
    return make_event(TaskMatched, subject=task_subject(task_id), subject_seq=1, producer="matcher/t",
                      actor="service:matcher", occurred_at=T0,
                      data={"task_id": task_id, "ranking": ranking, "chosen": card, "reason": "cheapest"})  # fmt: skip


def history() -> list:
    events = []
    for lease, task_id, project, scenario, card, gpus, start, minutes in LEASES:
        at = T0 + timedelta(minutes=start)
        end = at + timedelta(minutes=minutes, seconds=7, microseconds=123)
        events += [task(task_id, project, scenario), matched(task_id, card, minutes), granted(lease, task_id, card_type=card, gpus=gpus, at=at),
                   renewed(lease, task_id, at=at + timedelta(minutes=minutes // 2)),
                   released(lease, task_id, granted_at=at, ended_at=end, card_type=card, gpus=gpus),
                   succeeded(task_id, lease, 1000.0 * gpus, at=end)]  # fmt: skip
    return events


def expected_by_lease() -> tuple[Decimal, Decimal]:
    seconds = cost = Decimal(0)
    for _, _, _, _, card, gpus, _, minutes in LEASES:
        held = gpus * (Decimal(minutes * 60 + 7) + Decimal("0.000123"))
        seconds += held
        cost += (held * PRICE[card] / 3600).quantize(Decimal("0.000001"), ROUND_HALF_EVEN)
    return seconds, cost


async def test_a_round_reconciles_stores_its_report_and_keeps_every_note(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, LEDGER) as running, open_object_store(fresh_settings) as store:
        assert running.pool is not None
        await running.publish(*history())

        async def all_closed() -> bool:
            rows = await running.fetch("SELECT 1 FROM ledger.lease_usage WHERE closed_at IS NOT NULL")
            outputs = await running.fetch("SELECT 1 FROM ledger.task_output WHERE final")
            return len(rows) == 3 and len(outputs) == 3

        assert await running.wait_until(all_closed)
        async with running.pool.acquire() as conn, conn.transaction():
            with pytest.raises(RoundError, match="one-line retrospective note"):
                await close_round(conn, store, EMITTER, actor="user:planner", note="  ", now=utcnow(), period=PERIOD)
        async with running.pool.acquire() as conn, conn.transaction():
            first = await close_round(conn, store, EMITTER, actor="user:planner", now=utcnow(), period=PERIOD,
                                      note="H100 pretraining paid off;\n L40S evals were cheap")  # fmt: skip
        ledger_seconds, ledger_cost = (await running.pool.fetchrow(
            "SELECT sum(gpu_seconds) AS s, sum(cost) AS c FROM ledger.usage_increments"))  # fmt: skip
        stored = await running.pool.fetchrow("SELECT gpu_seconds, cost, note FROM ledger.rounds WHERE round_id = $1",
                                             first.round_id)  # fmt: skip
        report_files = {name: (await store.get(REPORTS_BUCKET, first.report_uri.split("/", 3)[3] + name)).body
                        for name in ("report.json", "report.csv", "report.html")}  # fmt: skip

        async with running.pool.acquire() as conn, conn.transaction():
            version = await amend_note(conn, store, EMITTER, first.round_id, "H100 paid off; L40S evals even more",
                                       actor="user:lead", reason="after the review", now=utcnow())  # fmt: skip
        html_versions = await store.list_versions(REPORTS_BUCKET, first.report_uri.split("/", 3)[3] + "report.html")

        async with running.pool.acquire() as conn, conn.transaction():
            second = await close_round(conn, store, EMITTER, actor="user:planner", note="a quiet week", now=utcnow(),
                                       period=PERIOD)  # fmt: skip
        rounds = await list_rounds(running.pool)
        shown = await load_round(running.pool, first.round_id)
        compared = compare_rounds(shown, await load_round(running.pool, second.round_id))
        outbox = await running.fetch("SELECT type, body FROM ledger.outbox WHERE type LIKE 'round.%' ORDER BY position")

    # reconciles with the ledger to the GPU-second, and with lease durations x prices to the micro-unit
    expected_seconds, expected_cost = expected_by_lease()
    assert stored["gpu_seconds"] == ledger_seconds == expected_seconds
    assert stored["cost"] == ledger_cost == expected_cost
    totals = first.report["totals"]
    assert (totals["tasks"], totals["leases"], totals["output_units"]) == (3, 3, 7000.0)
    by_project = {row["key"]: row for row in first.report["by_project"]}
    assert by_project["llm"]["output_units"] == 3000.0 and by_project["vision"]["output_units"] == 4000.0
    assert {row["key"] for row in first.report["by_scenario"]} == {"pretrain", "eval"}
    assert {row["key"] for row in first.report["by_card"]} == {"H100", "L40S"}
    review = first.report["review"]
    assert review["counts"] == {"worth_it": 1, "oversized": 2, "underestimated": 0}
    assert {t["task_id"]: t["verdict"] for t in review["tasks"]} == {"T1": "oversized", "T2": "worth_it", "T3": "oversized"}
    assert {(r["card_type"], r["tasks"]) for r in review["speed_corrections"]} == {("H100", 2), ("L40S", 1)}
    assert totals["finished_tasks"] == 3 and totals["estimated_cost"] == 3.0
    assert sum(Decimal(str(row["cost"])) for row in first.report["by_card"]) == pytest.approx(expected_cost)
    # the report in object storage, in three forms
    assert report_files["report.csv"].decode().splitlines()[0].startswith("grouping,key,tasks,leases,gpu_hours,cost")
    assert b'"round_id": "R0001"' in report_files["report.json"]
    assert b"<svg" in report_files["report.html"] and b"H100 pretraining paid off; L40S evals were cheap" in report_files["report.html"]
    page = report_files["report.html"].decode()
    assert "oversized · 选大了" in page and "在 H100 上运行" in page  # the review's verdicts and reasons also in Chinese
    # the note: one line, amended with history, every version kept, events with their actors
    assert stored["note"] == "H100 pretraining paid off; L40S evals were cheap"
    assert version == 2 and len(html_versions) == 2
    assert [(n["version"], n["actor"], n["note"]) for n in shown["notes"]] == [
        (1, "user:planner", "H100 pretraining paid off; L40S evals were cheap"),
        (2, "user:lead", "H100 paid off; L40S evals even more"),
    ]
    assert shown["note"] == "H100 paid off; L40S evals even more"
    assert [row["type"] for row in outbox] == ["round.closed", "round.note_amended", "round.closed"]
    assert '"actor":"user:planner"' in outbox[0]["body"] and '"actor":"user:lead"' in outbox[1]["body"]
    # rounds are contiguous and compare
    assert [(r["round_id"], r["note_versions"]) for r in rounds] == [("R0001", 2), ("R0002", 1)]
    assert second.starts_at == first.ends_at and second.report["totals"]["cost"] == 0.0
    assert compared["totals"]["cost"]["change"] == pytest.approx(-float(expected_cost))
    assert second.report["trend"][0]["round_id"] == "R0001"


async def test_spend_the_ledger_applies_after_its_round_closed_counts_in_the_next_round(fresh_settings: Settings) -> None:
    # A lease accounted before R0001's end but applied by the ledger only after R0001 closed (its events read
    # late): before, it fell in no round, and the rounds no longer added up to the ledger's totals. Likewise its
    # task's success (the estimate against actual), a flagged success and a preemption, all before R0001's end.
    early, late = history()[:6], history()[6:12] + flagged_history()[5:10] + preempted_run()  # T1; T2, EARLY, TP
    async with RunningServices(fresh_settings, LEDGER) as running, open_object_store(fresh_settings) as store:
        assert running.pool is not None

        async def closed(count: int) -> bool:
            return len(await running.fetch("SELECT 1 FROM ledger.lease_usage WHERE closed_at IS NOT NULL")) == count

        await running.publish(*early)
        assert await running.wait_until(lambda: closed(1))
        async with running.pool.acquire() as conn, conn.transaction():
            first = await close_round(conn, store, EMITTER, actor="user:planner", note="one lease", now=utcnow(),
                                      period=PERIOD)  # fmt: skip
        await running.publish(*late)
        assert await running.wait_until(lambda: closed(4))
        assert await running.wait_until(lambda: _any(running, "SELECT 1 FROM ledger.flagged_output"))
        async with running.pool.acquire() as conn, conn.transaction():
            second = await close_round(conn, store, EMITTER, actor="user:planner", note="the late one", now=utcnow(),
                                       period=PERIOD)  # fmt: skip
        total = await running.pool.fetchval("SELECT sum(gpu_seconds) FROM ledger.usage_increments")
        by_round = await running.fetch("SELECT round_id, gpu_seconds FROM ledger.rounds ORDER BY number")
        reviewed = [await review_matches(running.pool, round_id=r) for r in ("R0001", "R0002")]

    l2 = 1 * (Decimal(37 * 60 + 7) + Decimal("0.000123"))  # T2's lease: 1 L40S GPU for 37 min 7.000123 s
    le = 2 * Decimal(60)  # EARLY's lease: 2 L40S GPUs for 1 min
    lp = 1 * Decimal(120)  # TP's preempted lease: 1 L40S GPU for 2 min
    assert first.report["totals"]["leases"] == 1 and second.report["totals"]["leases"] == 3
    assert [r["round_id"] for r in by_round] == ["R0001", "R0002"] and by_round[1]["gpu_seconds"] == l2 + le + lp
    assert sum(r["gpu_seconds"] for r in by_round) == total
    # the late success is reviewed, and the late flagged success listed, by R0002 (the report and `cardflow review`)
    assert [[e["task_id"] for e in r.report["estimates"]] for r in (first, second)] == [["T1"], ["T2"]]
    assert [[t["task_id"] for t in r["tasks"]] for r in reviewed] == [["T1"], ["T2"]]
    assert [[f["task_id"] for f in r.report["flagged"]] for r in (first, second)] == [[], ["EARLY"]]
    assert [[f["task_id"] for f in r["flagged"]] for r in reviewed] == [[], ["EARLY"]]
    # the late preemption is R0002's loss: 2 minutes on 1 GPU since its start (it never checkpointed)
    assert [[(loss["lease_id"], loss["lost_gpu_hours"]) for loss in r.report["preemption_losses"]]
            for r in (first, second)] == [[], [("LP", pytest.approx(120 / 3600))]]


def preempted_run(task_id: str = "TP", lease_id: str = "LP", last_checkpoint_at: datetime | None = None) -> list:
    """A lease preempted after 2 minutes on 1 L40S GPU (never checkpointed, unless `last_checkpoint_at`)."""
    return [task(task_id, "llm", "sweep"), granted(lease_id, task_id, card_type="L40S", gpus=1, at=T0),
            released(lease_id, task_id, granted_at=T0, ended_at=T0 + timedelta(minutes=2), card_type="L40S", gpus=1,
                     reason="preempted", last_checkpoint_at=last_checkpoint_at)]  # fmt: skip


async def test_a_preempted_runs_loss_counts_from_the_checkpoint_its_release_names(fresh_settings: Settings) -> None:
    # TC checkpointed 90 s into its 2 minutes; the archive (`audit.events`) has no `task.checkpointed` when the
    # round closes (the ledger's archiver runs, but none is published here: as if it had not reached it).
    # Before, the round read the checkpoint only from the archive and counted TC's whole 2 minutes as lost;
    # now 30 s, from the checkpoint its `lease.released` names.
    events = preempted_run("TP") + preempted_run("TC", "LC", last_checkpoint_at=T0 + timedelta(seconds=90))
    async with RunningServices(fresh_settings, LEDGER) as running, open_object_store(fresh_settings) as store:
        assert running.pool is not None
        await running.publish(*events)
        assert await running.wait_until(lambda: _any(running, "SELECT 1 FROM ledger.lease_usage WHERE lease_id = 'LC'"
                                                              " AND closed_at IS NOT NULL"))  # fmt: skip
        async with running.pool.acquire() as conn, conn.transaction():
            closed = await close_round(conn, store, EMITTER, actor="user:planner", note="losses", now=utcnow(),
                                       period=PERIOD)  # fmt: skip
    losses = {loss["lease_id"]: loss["lost_gpu_hours"] for loss in closed.report["preemption_losses"]}
    assert losses == {"LP": pytest.approx(120 / 3600), "LC": pytest.approx(30 / 3600)}


async def test_a_runs_output_counts_in_each_round_by_what_it_gained_there(fresh_settings: Settings) -> None:
    # A: a checkpoint's 500 in R1, its final 1000 in R2 (before: R1 500 + R2 1000). B: a checkpoint made before
    # R1's end but applied after R1 closed (before: in no round). C: 400 counted by R1, then its success flagged
    # in R2 and cleared in R3 (before: R1's 400 stayed counted and R3 counted it again).
    early = utcnow()
    late_report = checkpointed("B", "LB", 300.0, at=early)
    async with RunningServices(fresh_settings, LEDGER) as running, open_object_store(fresh_settings) as store:
        assert running.pool is not None

        async def close(note: str) -> dict:
            async with running.pool.acquire() as conn, conn.transaction():
                return (await close_round(conn, store, EMITTER, actor="user:planner", note=note, now=utcnow(),
                                          period=PERIOD)).report  # fmt: skip

        async def until(sql: str) -> None:
            assert await running.wait_until(lambda: _any(running, sql)), sql

        await running.publish(*[task(t, "llm", "eval") for t in "ABC"],
                              *[granted(f"L{t}", t, card_type="L40S", gpus=1, at=early) for t in "ABC"],
                              checkpointed("A", "LA", 500.0, at=early), checkpointed("C", "LC", 400.0, at=early))  # fmt: skip
        await until("SELECT 1 FROM ledger.task_output HAVING count(*) = 2")
        first = await close("A and C checkpointed")
        now = utcnow()
        await running.publish(late_report, succeeded("A", "LA", 1000.0, at=now),
                              released("LA", "A", granted_at=early, ended_at=now, card_type="L40S", gpus=1),
                              succeeded("C", "LC", 450.0, at=now, flags=("implausibly_early_success",)))  # fmt: skip
        await until("SELECT 1 FROM ledger.flagged_output f, ledger.task_output o WHERE o.task_id = 'B'")
        await until("SELECT 1 FROM ledger.task_output WHERE task_id = 'A' AND final")
        second = await close("A finished, C flagged")
        await running.publish(flag_cleared("C", at=utcnow()))
        await until("SELECT 1 FROM ledger.task_output WHERE task_id = 'C'")
        third = await close("C cleared")
        ledger_total = await running.pool.fetchval("SELECT sum(output_units) FROM ledger.task_output")
        by_task = sum(Decimal(str(row["output_units"])) for row in await ledger_rows(running.pool, Grouping.TASK))
        recorded = await running.fetch("SELECT output_units FROM ledger.rounds ORDER BY number")
        marked = await running.fetch("SELECT round_id, sum(output_units) AS units FROM ledger.output_increments"
                                     " GROUP BY round_id ORDER BY round_id")  # fmt: skip

    def outputs(report: dict) -> dict[str, float]:
        return {row["key"]: row["output_units"] for row in report["by_task"] if row["output_units"]}

    assert [outputs(r) for r in (first, second, third)] == [
        {"A": 500.0, "C": 400.0}, {"A": 500.0, "B": 300.0, "C": -400.0}, {"C": 450.0}]
    assert ledger_total == by_task == Decimal(1750)  # A 1000 + B 300 + C 450 (the held-back output, cleared)
    assert sum(r["output_units"] for r in recorded) == ledger_total  # the rounds add up to the ledger, exactly
    assert [(m["round_id"], m["units"]) for m in marked] == [("R0001", 900), ("R0002", 400), ("R0003", 450)]
    assert {row["key"]: row["cost_per_output_unit"] for row in second["by_task"]}["C"] is None  # negative output


async def _any(running: RunningServices, sql: str) -> bool:
    return bool(await running.fetch(sql))


def flagged_history() -> list:
    """OK ran as estimated (output 1000, counted); EARLY reported success after 1 of 60 estimated
    minutes (flagged, its 400 held back); OVER claimed 1e9, beyond the policy's bound (flagged, no output)."""
    events = []
    for task_id, lease, minutes, output, flags, claimed in (
        ("OK", "LO", 60, 1000.0, (), None), ("EARLY", "LE", 1, 400.0, ("implausibly_early_success",), None),
        ("OVER", "LV", 60, None, ("output_out_of_bounds",), 1e9),
    ):  # fmt: skip
        end = T0 + timedelta(minutes=minutes)
        events += [task(task_id, "llm", "eval"), matched(task_id, "L40S", 60), granted(lease, task_id, card_type="L40S", at=T0),
                   released(lease, task_id, granted_at=T0, ended_at=end, card_type="L40S"),
                   succeeded(task_id, lease, output, at=end, flags=flags, claimed=claimed)]  # fmt: skip
    return events


async def test_a_round_lists_its_flagged_successes_apart_everywhere(fresh_settings: Settings) -> None:
    root = await first_admin(fresh_settings)
    async with RunningServices(fresh_settings, LEDGER) as running:
        await running.publish(*flagged_history())

        async def settled() -> bool:
            closed = await running.fetch("SELECT 1 FROM ledger.lease_usage WHERE closed_at IS NOT NULL")
            return len(closed) == 3 and len(await running.fetch("SELECT 1 FROM ledger.flagged_output")) == 2

        assert await running.wait_until(settled)
        async with console_client(fresh_settings, root) as client:
            closed = await client.post("/v1/rounds/close", json={"note": "two runs flagged", "reason": "test"})
            assert closed.status_code == 201, closed.text
            round_id = closed.json()["round_id"]
            pages = {lang: (await client.get(f"/rounds/{round_id}", params={"lang": lang})).text for lang in ("en", "zh")}
        stored = await running.pool.fetchrow("SELECT output_units, report FROM ledger.rounds WHERE round_id = $1", round_id)
        async with open_object_store(fresh_settings) as store:
            prefix = closed.json()["report_uri"].split("/", 3)[3]
            files = {name: (await store.get(REPORTS_BUCKET, prefix + name)).body.decode()
                     for name in ("report.json", "report.csv", "report.html")}  # fmt: skip
        with serving_console(fresh_settings) as url:
            env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": root, "COLUMNS": "200"}
            shown = {lang: CliRunner().invoke(cli, ["round", "show", round_id, "--lang", lang], env=env) for lang in ("en", "zh")}

    # PostgreSQL: the round counts OK's output only; the flagged runs are listed with their flags and held-back output
    report = stored["report"]
    assert stored["output_units"] == 1000 and report["totals"]["output_units"] == 1000.0
    assert (report["totals"]["flagged_runs"], report["totals"]["flagged_output_units"]) == (2, 400.0)
    assert [(f["task_id"], f["flags"], f["output_units"], f["claimed_output_units"]) for f in report["flagged"]] == [
        ("EARLY", ["implausibly_early_success"], 400.0, None), ("OVER", ["output_out_of_bounds"], None, 1e9)]
    assert {row["key"]: row["output_units"] for row in report["by_task"]} == {"OK": 1000.0, "EARLY": 0.0, "OVER": 0.0}
    # the bucket: JSON, CSV (one `flagged` row per run) and HTML
    assert '"flagged_runs": 2' in files["report.json"]
    assert "flagged,EARLY,1,,,,400.0,samples," in files["report.csv"].splitlines()
    assert "Flagged successes" in files["report.html"] and "成功过早（待复核）" in files["report.html"]
    # the console's round page, both languages
    assert "Flagged successes" in pages["en"] and "implausibly_early_success" in pages["en"] and "judged" in pages["en"]
    assert "被标记的成功" in pages["zh"] and "产出超出上限（不计入）" in pages["zh"]
    # `cardflow round show`, English and Chinese
    assert shown["en"].exit_code == 0, shown["en"].output
    (early,) = [line for line in shown["en"].output.splitlines() if line.startswith("│ EARLY")]
    assert "implausibly_early_success" in early and "400" in early, shown["en"].output
    assert shown["zh"].exit_code == 0 and "被标记的成功（产出不计入）" in shown["zh"].output, shown["zh"].output
    assert "成功过早（待复核）" in shown["zh"].output
