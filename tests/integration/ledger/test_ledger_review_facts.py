"""The match review's GPU utilisation and simulated time against real PostgreSQL, Redis and S3: renewals
with known utilisation give the expected time-weighted mean and verdict, and a lease granted on a node
with time scale 60 whose run took 6 s of wall clock shows 0.1 h, marked simulated — in the HTTP
endpoints, the round report (JSON, CSV, HTML), the console's /review page and the CLI."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.ledger.service import LedgerSettings, build_spec
from shared.events import TaskMatched, make_event
from shared.events.subjects import task_subject
from shared.names import REPORTS_BUCKET
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.console_server import bearer, console_client, first_admin, serving_console
from tests.helpers.running_services import RunningServices
from tests.integration.ledger.test_ledger_rounds import task
from tests.unit.ledger.builders import T0, granted, released, renewed, succeeded

pytestmark = pytest.mark.integration

LEDGER = build_spec(tuning=LedgerSettings(round_period_days=36500), periodic_check_s=0.2)  # never closes by itself


def at(seconds: float) -> object:
    return T0 + timedelta(seconds=seconds)


def matched(task_id: str, ranking: list[tuple[str, float, float]]) -> TaskMatched:
    return make_event(TaskMatched, subject=task_subject(task_id), subject_seq=1, producer="matcher/t",
                      actor="service:matcher", occurred_at=T0, data={
                          "task_id": task_id, "chosen": ranking[0][0], "reason": "cheapest",
                          "ranking": [{"card_type": c, "est_runtime_s": s, "est_cost": p} for c, s, p in ranking]})  # fmt: skip


def history() -> list:
    return [
        # SIM: 2 GPUs of H100 on a x60 agent, 6 s of wall clock = 0.1 h of agent time, as estimated;
        # utilisation 20 % over 1 s, 50 % over 3 s, 10 % over the last 2 s: time-weighted 31.67 % (plain mean 26.67)
        task("SIM", "llm", "pretrain"), matched("SIM", [("H100", 360.0, 1.0), ("A100", 720.0, 0.5)]),
        granted("LS", "SIM", card_type="H100", gpus=2, at=at(0), time_scale=60.0),
        renewed("LS", "SIM", at=at(1), util=20.0, seq=2), renewed("LS", "SIM", at=at(4), util=50.0, seq=3),
        released("LS", "SIM", granted_at=at(0), ended_at=at(6), card_type="H100", gpus=2, util=10.0, seq=4),
        succeeded("SIM", "LS", 100.0, at=at(6)),
        # REAL: 2 GPUs of L40S on a real agent, 60 s as estimated, 90 % over 30 s then 70 %: 80 %
        task("REAL", "vision", "eval"), matched("REAL", [("L40S", 60.0, 0.03)]),
        granted("LR", "REAL", card_type="L40S", gpus=2, at=at(0)),
        renewed("LR", "REAL", at=at(30), util=90.0),
        released("LR", "REAL", granted_at=at(0), ended_at=at(60), card_type="L40S", gpus=2, util=70.0),
        succeeded("REAL", "LR", 50.0, at=at(60)),
    ]  # fmt: skip


async def settled(running: RunningServices) -> bool:
    closed = await running.fetch("SELECT 1 FROM ledger.lease_usage WHERE closed_at IS NOT NULL")
    final = await running.fetch("SELECT 1 FROM ledger.task_output WHERE final")
    return len(closed) == 2 and len(final) == 2


async def test_the_review_shows_mean_utilisation_and_simulated_runtimes_everywhere(fresh_settings: Settings) -> None:
    root = await first_admin(fresh_settings)
    async with RunningServices(fresh_settings, LEDGER) as running:
        await running.publish(*history())
        assert await running.wait_until(lambda: settled(running))
        stored = {r["lease_id"]: r for r in await running.fetch(
            "SELECT lease_id, gpu_seconds, util_gpu_seconds, busy_gpu_seconds, time_scale FROM ledger.lease_usage")}  # fmt: skip
        async with console_client(fresh_settings, root) as client:
            review = (await client.get("/v1/review", params={"by": "card"})).json()
            match = (await client.get("/v1/matches/SIM")).json()
            page = (await client.get("/review")).text
            page_zh = (await client.get("/review", params={"lang": "zh"})).text
            closed = await client.post("/v1/rounds/close", json={"note": "the x60 H100 run idled", "reason": "test"})
            assert closed.status_code == 201, closed.text
            report = closed.json()
            round_page = (await client.get(f"/rounds/{report['round_id']}", params={"lang": "en"})).text
        async with open_object_store(fresh_settings) as store:
            prefix = report["report_uri"].split("/", 3)[3]
            files = {name: (await store.get(REPORTS_BUCKET, prefix + name)).body.decode()
                     for name in ("report.json", "report.html")}  # fmt: skip
        with serving_console(fresh_settings) as url:
            env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": root}
            shown = CliRunner().invoke(cli, ["review"], env=env)
            shown_zh = CliRunner().invoke(cli, ["review", "--lang", "zh"], env=env)
            explained = CliRunner().invoke(cli, ["matches", "SIM"], env=env)

    # the ledger keeps per lease what the mean needs: reported and busy GPU-seconds, and the time scale
    assert (stored["LS"]["gpu_seconds"], stored["LS"]["util_gpu_seconds"], stored["LS"]["time_scale"]) == (12, 12, 60.0)
    assert stored["LS"]["busy_gpu_seconds"] == Decimal("3.8")  # 2 GPUs x (0.2 x 1 s + 0.5 x 3 s + 0.1 x 2 s)
    assert stored["LR"]["time_scale"] == 1.0
    # the HTTP review: the expected mean, the verdict it drives, runtimes in the agent's time
    tasks = {t["task_id"]: t for t in review["tasks"]}
    sim, real = tasks["SIM"], tasks["REAL"]
    assert sim["util_pct"] == pytest.approx(190 / 6) and sim["util_coverage"] == 1.0
    assert (sim["runtime_s"], sim["wall_runtime_s"], sim["simulated"]) == (pytest.approx(360.0), 6.0, "simulated ×60")
    assert sim["ratio"] == pytest.approx(1.0) and sim["verdict"] == "oversized"
    assert sim["reason"].startswith("its GPUs were 32% busy on average (time-weighted, under 40%);"
                                    " a cheaper card would likely do: A100"), sim["reason"]
    assert "ran 0.10 h (simulated ×60) on H100" in sim["reason"]
    assert (real["util_pct"], real["simulated"], real["verdict"], real["runtime_s"]) == (pytest.approx(80.0), None,
                                                                                          "worth_it", 60.0)  # fmt: skip
    groups = {g["key"]: g for g in review["groups"]}
    assert groups["H100"]["simulated"] == "simulated ×60" and groups["H100"]["gpu_hours"] == pytest.approx(0.2)
    assert groups["L40S"]["simulated"] is None and groups["L40S"]["mean_util_pct"] == pytest.approx(80.0)
    assert match["review"]["util_pct"] == pytest.approx(190 / 6) and match["review"]["simulated"] == "simulated ×60"
    # the console's /review page (both languages) and the round page
    assert "simulated ×60" in page and "32%" in page and "80%" in page and "time-weighted" in page
    assert "模拟 ×60" in page_zh and "时间加权" in page_zh
    assert "simulated ×60" in round_page and "32%" in round_page
    # the round report: JSON (in PostgreSQL and the bucket) and HTML
    estimates = {r["task_id"]: r for r in report["report"]["estimates"]}
    assert estimates["SIM"]["runtime_h"] == pytest.approx(0.1) and estimates["SIM"]["simulated"] == "simulated ×60"
    assert estimates["SIM"]["util_pct"] == pytest.approx(190 / 6) and estimates["REAL"]["simulated"] is None
    assert '"simulated": "simulated ×60"' in files["report.json"] and '"util_pct": 31.66' in files["report.json"]
    assert "simulated ×60" in files["report.html"] and "31.6667" in files["report.html"]
    # the CLI
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.split())  # rich wraps long lines at the runner's 80 columns
    assert "H100: simulated ×60 — its runtimes" in flat and "weighted by the time each report covers" in flat, flat
    (sim_row,) = [line for line in shown.output.splitlines() if line.startswith("│ SIM ")]
    assert "│ 0.1 " in sim_row and "simulated" in sim_row and "31.67" in sim_row, shown.output
    (real_row,) = [line for line in shown.output.splitlines() if line.startswith("│ REAL ")]
    assert "│ real " in real_row and "│ 80 " in real_row, shown.output
    assert shown_zh.exit_code == 0 and "H100：模拟 ×60" in " ".join(shown_zh.output.split()), shown_zh.output
    assert explained.exit_code == 0, explained.output
    flat = " ".join(explained.output.split())
    assert "ran 0.10 h (simulated ×60, wall clock 6 s) · GPUs 32% busy (time-weighted mean over 100% of the run)" in flat
