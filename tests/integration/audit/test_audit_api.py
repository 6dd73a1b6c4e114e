"""The audit, rounds and review endpoints against real servers: roles (auditor reads audit data,
operators close rounds, any token reads rounds), and the CLI commands as clients of them."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.console.projector import SPEC as views_spec
from services.identity.bootstrap import bootstrap_admin
from services.ledger.service import LedgerSettings, build_spec
from shared.settings import Settings
from tests.helpers.console_server import bearer, console_client, serving_console
from tests.helpers.running_services import RunningServices
from tests.integration.ledger.test_ledger_rounds import history

pytestmark = pytest.mark.integration

LEDGER = build_spec(tuning=LedgerSettings(round_period_days=36500), periodic_check_s=0.2)
VIEWS = views_spec
CJK = re.compile(r"[\u4e00-\u9fff]")


async def tokens(client, root: str) -> dict[str, str]:
    made = {}
    for name, role in (("ada", "auditor"), ("otto", "operator"), ("sam", "submitter")):
        answer = await client.post("/v1/tokens", headers=bearer(root), json={"name": name, "role": role, "reason": "test"})
        assert answer.status_code == 201, answer.text
        made[role] = answer.json()["secret"]
    return made


async def settled(running: RunningServices) -> bool:
    closed = await running.fetch("SELECT 1 FROM ledger.lease_usage WHERE closed_at IS NOT NULL")
    archived = await running.fetch("SELECT 1 FROM audit.events")
    unarchived_usage = await running.fetch(  # the events that announced the ledger's increments, not archived yet
        "SELECT 1 FROM ledger.usage_increments i WHERE NOT EXISTS (SELECT 1 FROM audit.events a WHERE a.event_id = i.event_id)")
    views = await running.fetch("SELECT 1 FROM views.tasks WHERE state = 'succeeded'")
    return len(closed) == 3 and len(archived) > len(history()) and not unarchived_usage and len(views) == 3


async def test_audit_and_rounds_endpoints_with_their_roles(fresh_settings: Settings) -> None:
    root = (await bootstrap_admin(fresh_settings.database_dsn or "", "root")).secret
    async with RunningServices(fresh_settings, LEDGER, VIEWS) as running, console_client(fresh_settings) as client:
        await running.publish(*history())
        assert await running.wait_until(lambda: settled(running))
        token = await tokens(client, root)

        assert (await client.get("/v1/audit/verify")).status_code == 401
        refused = await client.get("/v1/audit/why/T1", headers=bearer(token["operator"]))
        assert refused.status_code == 403 and "auditor" in refused.json()["detail"]
        verified = (await client.get("/v1/audit/verify", params={"settle_s": 20}, headers=bearer(token["auditor"]))).json()
        assert verified["ok"] and verified["events"] >= len(history()), json.dumps(verified, indent=1)
        story = (await client.get("/v1/audit/why/T1", headers=bearer(token["auditor"]))).json()
        assert story["runs"][0]["lease_ids"] == ["L1"] and story["steps"][0]["type"] == "task.submitted"
        chinese = (await client.get("/v1/audit/why/T1", params={"lang": "zh"}, headers=bearer(token["auditor"]))).json()
        assert chinese["steps"][0]["event_label"] == "已提交" and chinese["steps"][0]["sentence"].startswith("已提交")
        assert [s["type"] for s in chinese["steps"]] == [s["type"] for s in story["steps"]]
        assert all(CJK.search(s["sentence"]) for s in chinese["steps"]), chinese["steps"]
        assert chinese["runs"][0]["end_reason_label"] == "已完成" and story["runs"][0]["end_reason_label"] == "succeeded"
        assert (await client.get("/v1/audit/why/nope", headers=bearer(token["auditor"]))).status_code == 404
        replayed = (await client.get("/v1/audit/replay", headers=bearer(token["auditor"]),
                                     params={"until": "2025-01-06T09:30:00Z"})).json()  # fmt: skip
        assert {lease["lease_id"] for lease in replayed["active_leases"]} == {"L1", "L2", "L3"}
        naive = await client.get("/v1/audit/replay", headers=bearer(token["auditor"]), params={"until": "2025-01-06T09:30:00"})
        assert naive.status_code == 422 and "time zone" in naive.text

        assert (await client.post("/v1/rounds/close", json={"note": "x"}, headers=bearer(token["auditor"]))).status_code == 403
        closed = await client.post("/v1/rounds/close", headers=bearer(token["operator"]),
                                   json={"note": "pretraining on H100 paid off", "reason": "weekly review"})  # fmt: skip
        assert closed.status_code == 201, closed.text
        round_id = closed.json()["round_id"]
        amended = await client.post(f"/v1/rounds/{round_id}/note", headers=bearer(token["operator"]),
                                    json={"note": "H100 paid off; move evals to L40S"})  # fmt: skip
        assert amended.json() == {"round_id": round_id, "version": 2}
        assert (await client.post("/v1/rounds/R9999/note", headers=bearer(token["operator"]), json={"note": "x"})).status_code == 404
        listed = (await client.get("/v1/rounds", headers=bearer(token["submitter"]))).json()
        assert [(r["round_id"], r["closed_by"], r["note_versions"]) for r in listed] == [(round_id, "user:otto", 2)]
        shown = (await client.get(f"/v1/rounds/{round_id}", headers=bearer(token["submitter"]))).json()
        assert [n["actor"] for n in shown["notes"]] == ["user:otto", "user:otto"] and shown["report"]["totals"]["leases"] == 3
        match = (await client.get("/v1/matches/T1", headers=bearer(token["submitter"]))).json()
        assert match["finished"] and match["review"]["verdict"] == "oversized"
        reviewed = (await client.get("/v1/review", params={"round": round_id, "by": "project"},
                                     headers=bearer(token["submitter"]))).json()  # fmt: skip
        assert {g["key"] for g in reviewed["groups"]} == {"llm", "vision"}
        log = (await client.get("/v1/audit/log", headers=bearer(token["auditor"]), params={"actor": "otto"})).json()

        async def archived_round_events() -> bool:
            found = (await client.get("/v1/audit/log", headers=bearer(token["auditor"]), params={"actor": "otto"})).json()
            return len(found) >= 2

        assert await running.wait_until(archived_round_events)
        log = (await client.get("/v1/audit/log", headers=bearer(token["auditor"]), params={"actor": "otto"})).json()
        assert [row["type"] for row in log] == ["round.note_amended", "round.closed"]


async def test_the_cli_commands_are_clients_of_the_api(fresh_settings: Settings) -> None:
    root = (await bootstrap_admin(fresh_settings.database_dsn or "", "root")).secret
    runner = CliRunner()
    async with RunningServices(fresh_settings, LEDGER, VIEWS) as running:
        await running.publish(*history())
        assert await running.wait_until(lambda: settled(running))
        with serving_console(fresh_settings) as url:  # its relay publishes the bootstrap's token.created

            async def token_archived() -> bool:
                return bool(await running.fetch("SELECT 1 FROM audit.events WHERE type = 'token.created'"))

            assert await running.wait_until(token_archived)
            # the commands block this loop while they run; the ledger has nothing left to do meanwhile
            env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": root}
            verify = runner.invoke(cli, ["audit", "verify", "--settle", "0"], env=env)
            assert verify.exit_code == 0, verify.output
            assert "the history holds" in verify.output
            verify_zh = runner.invoke(cli, ["audit", "verify", "--settle", "0", "--lang", "zh"], env=env | {"COLUMNS": "200"})
            assert verify_zh.exit_code == 0 and "历史记录完好" in verify_zh.output and "哈希链" in verify_zh.output, verify_zh.output
            assert "holds" not in verify_zh.output and "events" not in verify_zh.output, verify_zh.output
            why = runner.invoke(cli, ["audit", "why", "T1", "--lang", "zh"], env=env)
            assert why.exit_code == 0 and "运行成功" in why.output and "已提交" in why.output, why.output
            assert "submitted" not in why.output.replace("task.submitted", ""), why.output  # no English left but the type
            closed = runner.invoke(cli, ["round", "close", "--note", "H100 paid off", "--reason", "weekly"], env=env)
            assert closed.exit_code == 0 and "round R0001" in closed.output, closed.output
            listed = runner.invoke(cli, ["round", "list", "--json"], env=env)
            assert listed.exit_code == 0 and '"round_id": "R0001"' in listed.output
            assert runner.invoke(cli, ["round", "note", "R0001", "--note", "amended"], env=env).exit_code == 0
            noted_zh = runner.invoke(cli, ["round", "note", "R0001", "--note", "再改一次", "--lang", "zh"], env=env)
            assert noted_zh.exit_code == 0 and "周期 R0001：复盘备注已存为第 3 版" in noted_zh.output, noted_zh.output
            assert "amended" in runner.invoke(cli, ["round", "show", "R0001"], env=env).output
            shown_zh = runner.invoke(cli, ["round", "show", "R0001", "--lang", "zh"], env=env | {"COLUMNS": "200"}).output
            assert "周期 R0001" in shown_zh and "结算：再改一次" in shown_zh and "复盘备注第 2 版（user:root）：amended" in shown_zh, shown_zh
            assert "closed by" not in shown_zh and "note v" not in shown_zh, shown_zh
            compared = runner.invoke(cli, ["round", "compare", "R0001", "R0001"], env=env)
            assert compared.exit_code == 0 and "R0001 → R0001" in compared.output
            matches = runner.invoke(cli, ["matches", "T1"], env=env)
            assert matches.exit_code == 0 and "oversized" in matches.output, matches.output
            review = runner.invoke(cli, ["review", "--by", "card"], env=env)
            assert review.exit_code == 0 and "H100" in review.output
            # in Chinese: verdicts by their labels, reasons rendered from the facts (not the English sentence)
            matches_zh = runner.invoke(cli, ["matches", "T1", "--lang", "zh"], env=env)
            assert matches_zh.exit_code == 0 and "选大了" in matches_zh.output, matches_zh.output
            flat = "".join(matches_zh.output.split())  # rich wraps lines at the terminal's width
            assert "在H100上运行" in flat and "单位产出成本" in flat, matches_zh.output
            review_zh = runner.invoke(cli, ["review", "--by", "card"], env=env | {"CARDFLOW_LANG": "zh"})
            assert review_zh.exit_code == 0 and "选大了" in review_zh.output and "值得" in review_zh.output, review_zh.output
            flat = "".join(review_zh.output.split())
            assert "上运行" in flat and "wouldhavetaken" not in flat and "busy" not in flat, review_zh.output
            review_json_zh = json.loads(runner.invoke(cli, ["review", "--json", "--lang", "zh"], env=env).output)
            assert {t["verdict"] for t in review_json_zh["tasks"]} <= {"worth_it", "oversized", "underestimated"}
            log = runner.invoke(cli, ["audit", "log", "--json"], env=env)
            assert log.exit_code == 0 and json.loads(log.output)[-1]["type"] == "token.created"
            replayed = runner.invoke(cli, ["audit", "replay", "--until", "2025-01-06T09:30:00Z", "--json"], env=env)
            assert replayed.exit_code == 0 and len(json.loads(replayed.output)["active_leases"]) == 3
            nobody = runner.invoke(cli, ["audit", "verify"], env={"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": "cfk_wrong"})
            assert nobody.exit_code == 3
