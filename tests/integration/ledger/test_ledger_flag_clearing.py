"""Clearing a flagged success against real Redis, PostgreSQL and S3: a reviewer checks the output and
clears the flag (HTTP and `cardflow review clear-flag`); the clearing is a `task.flag_cleared` event
with the reviewer as actor and the reason, told by `audit why` and `audit log`; the ledger moves the
held-back output into the counted totals exactly once (a redelivered or repeated clear moves nothing)
and the next round counts it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.console.projector import SPEC as VIEWS
from services.intake.service import SPEC as INTAKE
from services.ledger.service import LedgerSettings, build_spec
from shared.events.envelope import new_event_id
from shared.settings import Settings
from tests.helpers.console_server import bearer, console_client, first_admin, serving_console
from tests.helpers.running_services import RunningServices
from tests.integration.ledger.test_ledger_rounds import flagged_history

pytestmark = pytest.mark.integration

LEDGER = build_spec(tuning=LedgerSettings(round_period_days=36500), periodic_check_s=0.2)  # never closes by itself


async def test_a_reviewer_clears_a_flag_and_the_ledger_counts_the_output_once(fresh_settings: Settings) -> None:
    root = await first_admin(fresh_settings)
    async with RunningServices(fresh_settings, LEDGER, INTAKE, VIEWS) as running:
        await running.publish(*flagged_history())

        async def settled() -> bool:
            flagged = await running.fetch("SELECT 1 FROM ledger.flagged_output")
            views = await running.fetch("SELECT 1 FROM views.tasks WHERE state = 'succeeded'")
            return len(flagged) == 2 and len(views) == 3

        assert await running.wait_until(settled)
        async with console_client(fresh_settings, root) as client:
            made = {}
            for name, role in (("rita", "reviewer"), ("test", "reviewer"), ("otto", "operator")):
                answer = await client.post("/v1/tokens", json={"name": name, "role": role, "reason": "test"})
                assert answer.status_code == 201, answer.text
                made[name] = answer.json()["secret"]

            def clear(task_id: str, token: str, body: dict | None = None):  # noqa: ANN202
                return client.post(f"/v1/review/{task_id}/clear-flag", json={"reason": "checked the samples by hand"}
                                   if body is None else body, headers=bearer(token))  # fmt: skip

            refusals = {
                "no reason": (await clear("EARLY", made["rita"], {})).status_code,
                "operator": (await clear("EARLY", made["otto"])).status_code,
                "the submitter": (await clear("EARLY", made["test"])).status_code,
                "unknown task": (await clear("NOPE", made["rita"])).status_code,
                "not flagged": (await clear("OK", made["rita"])).status_code,
            }
            cleared = await clear("EARLY", made["rita"])
            assert cleared.status_code == 202, cleared.text

            async def moved() -> bool:
                rows = await running.fetch("SELECT 1 FROM ledger.task_output WHERE task_id = 'EARLY' AND final")
                return bool(rows)

            assert await running.wait_until(moved)
            (event,) = await running.events("task.flag_cleared")
            await running.publish(event)  # redelivered: the ledger's inbox takes it once
            again = event.model_copy(update={"event_id": new_event_id()})
            await running.publish(again)  # a second clearing event (another id): nothing is left to move
            twice = await clear("EARLY", made["rita"])

            async def archived() -> bool:
                rows = await running.fetch("SELECT 1 FROM audit.events WHERE type = 'task.flag_cleared'")
                return len(rows) == 2

            assert await running.wait_until(archived)
            closed = await client.post("/v1/rounds/close", json={"note": "EARLY checked by hand", "reason": "test"},
                                       headers=bearer(made["otto"]))  # fmt: skip
            assert closed.status_code == 201, closed.text
        outputs = await running.fetch("SELECT task_id, output_units, final FROM ledger.task_output ORDER BY task_id")
        record = await running.pool.fetchrow(
            "SELECT cleared_by, clear_reason, clear_event_id FROM ledger.flagged_output WHERE task_id = 'EARLY'")
        with serving_console(fresh_settings) as url:
            as_rita = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": made["rita"], "COLUMNS": "200"}
            as_root = as_rita | {"CARDFLOW_TOKEN": root}
            cli_clear = CliRunner().invoke(cli, ["review", "clear-flag", "OVER", "--reason", "claim was a unit mix-up"],
                                           env=as_rita)  # fmt: skip

            async def over_cleared() -> bool:  # the CLI blocked this loop; the ledger catches up now
                return bool(await running.fetch("SELECT 1 FROM ledger.flagged_output WHERE cleared_at IS NOT NULL"
                                                " AND task_id = 'OVER'"))  # fmt: skip

            assert await running.wait_until(over_cleared)
            why = CliRunner().invoke(cli, ["audit", "why", "EARLY"], env=as_root)
            log = CliRunner().invoke(cli, ["audit", "log", "--type", "task.flag_cleared", "--json"], env=as_root)
            review = CliRunner().invoke(cli, ["review", "--json"], env=as_root)

    assert refusals == {"no reason": 422, "operator": 403, "the submitter": 403, "unknown task": 404, "not flagged": 409}
    assert cleared.json() == {"task_id": "EARLY", "cleared_by": "user:rita", "reason": "checked the samples by hand",
                              "runs": [{"lease_id": "LE", "output_units": 400.0, "flags": ["implausibly_early_success"]}]}
    assert twice.status_code == 409
    # the held-back output counted once, as final output; the flagged row kept as the record
    assert [(r["task_id"], r["output_units"], r["final"]) for r in outputs] == [("EARLY", 400, True), ("OK", 1000, True)]
    assert (record["cleared_by"], record["clear_reason"], record["clear_event_id"]) == (
        "user:rita", "checked the samples by hand", event.event_id)
    totals = closed.json()["report"]["totals"]
    assert (totals["output_units"], totals["flagged_runs"]) == (1400.0, 1)  # OVER is still flagged then
    # the CLI: a claim refused as out of bounds stays uncounted; audit why / log tell who and why
    assert cli_clear.exit_code == 0 and "flag cleared by user:rita" in cli_clear.output, cli_clear.output
    assert "(0 units)" in cli_clear.output
    assert why.exit_code == 0 and "flagged success cleared by user:rita" in " ".join(why.output.split()), why.output
    assert log.exit_code == 0 and '"reason": "checked the samples by hand"' in log.output, log.output
    assert '"actor": "user:rita"' in log.output
    assert review.exit_code == 0 and '"flagged": []' in review.output, review.output
