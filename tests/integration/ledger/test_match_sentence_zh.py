"""`/v1/matches/{task}` and `cardflow matches` say why a card type was chosen in the reader's language.

The ledger keeps only the matcher's English sentence; the Chinese one is rendered from the numbers
the matcher stored with that match (its `task.matched` event id ties the two)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.ledger.service import build_spec as build_ledger
from services.matcher.service import build_spec as build_matcher
from shared.settings import Settings
from tests.helpers.console_server import console_client, first_admin, serving_console
from tests.helpers.running_services import RunningServices
from tests.unit.matcher.builders import registered, submitted

pytestmark = pytest.mark.integration


async def test_the_match_sentence_comes_in_chinese_from_the_matchers_numbers(fresh_settings: Settings) -> None:
    root = await first_admin(fresh_settings)
    async with RunningServices(fresh_settings, build_matcher(), build_ledger()) as running:
        await running.publish(registered("n1", "H100"), registered("n2", "A10", 4), submitted("T-zh", gpus=1, min_vram_gb=20))
        (matched,) = await running.wait_for_events("task.matched", 1)

        async def in_the_ledger() -> bool:
            return bool(await running.fetch("SELECT 1 FROM ledger.task_matches WHERE task_id = 'T-zh'"))

        assert await running.wait_until(in_the_ledger)
        async with console_client(fresh_settings, root) as client:
            english = (await client.get("/v1/matches/T-zh")).json()
            chinese = (await client.get("/v1/matches/T-zh", params={"lang": "zh"})).json()
        with serving_console(fresh_settings) as url:
            shown_zh = CliRunner().invoke(cli, ["matches", "T-zh", "--lang", "zh"], env={"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": root})

    chosen = matched.data.chosen
    assert english["why"] == matched.data.reason and english["match_event_id"] == matched.event_id
    assert chinese["why"].startswith(f"{chosen} 是满足要求的最便宜卡型") and chinese["why"] != english["why"]
    assert shown_zh.exit_code == 0, shown_zh.output
    assert "是满足要求的最便宜卡型" in "".join(shown_zh.output.split()), shown_zh.output
