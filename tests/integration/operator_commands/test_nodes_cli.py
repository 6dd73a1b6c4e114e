"""`cardflow nodes` live: the fleet as the views know it, like Slurm's sinfo, for any valid token."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner, Result

from services.cli.main import app
from services.console.projector import SPEC as VIEWS
from services.console.views import load_fleet
from shared.events import new_event_id
from shared.events.subjects import node_subject
from shared.settings import Settings, get_settings
from tests.helpers.console_server import serving_console
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import TaskStory

runner = CliRunner()
CLEARED = ("CARDFLOW_API_URL", "CARDFLOW_TOKEN", "CARDFLOW_TOKEN_FILE", "CARDFLOW_DATABASE_URL", "CARDFLOW_REDIS_URL")


def cardflow(*args: str, **env: str) -> Result:
    environment: dict[str, str | None] = {key: None for key in CLEARED} | {"COLUMNS": "200"} | env
    get_settings.cache_clear()  # commands that read settings must see this call's environment, not an earlier test's
    return runner.invoke(app, list(args), env=environment)


async def test_nodes_shows_used_borrowed_free_and_state_per_node(fresh_settings: Settings, tmp_path: Path) -> None:
    core, filler = TaskStory(new_event_id()), TaskStory(new_event_id())
    fleet = TaskStory("fleet")
    events = [
        fleet.emit("dispatcher", "node.registered", {"node_id": "h100-a", "agent_id": "agent-a", "card_type": "H100",
                                                     "gpus": 8, "mode": "sim"}, subject=node_subject("h100-a")),
        fleet.emit("dispatcher", "node.registered", {"node_id": "l40s-b", "agent_id": "agent-b", "card_type": "L40S",
                                                     "gpus": 8, "mode": "sim"}, subject=node_subject("l40s-b")),
        fleet.emit("dispatcher", "node.lost", {"node_id": "l40s-b", "agent_id": "agent-b", "detail": "silent 30 s"},
                   subject=node_subject("l40s-b")),
        core.submitted(priority_class="core"), core.granted(node="h100-a", card="H100", gpus=(0, 1)),
        filler.submitted(priority_class="opportunistic", gpus=1), filler.granted(node="h100-a", card="H100", gpus=(2,)),
    ]  # fmt: skip
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.publish(*events)

        async def projected() -> bool:
            nodes = (await load_fleet(services.pool)).nodes
            return any(node.gpus_leased == 3 for node in nodes) and any(not node.alive for node in nodes)

        assert await services.wait_until(projected)
    listed, table, table_zh, refused = await asyncio.to_thread(run_nodes, fresh_settings, tmp_path)

    rows = {row["node_id"]: row for row in listed}
    assert {key: rows["h100-a"][key] for key in ("card_type", "state", "gpus", "used", "borrowed", "free")} == {
        "card_type": "H100", "state": "up", "gpus": 8, "used": 3, "borrowed": 1, "free": 5,
    }
    assert (rows["l40s-b"]["state"], rows["l40s-b"]["used"], rows["l40s-b"]["free"]) == ("lost", 0, 0)
    assert "borrowed" in table and "h100-a" in table and "lost" in table
    assert all(word in table_zh for word in ("借用", "卡型", "在线", "失联", "最近心跳")), table_zh
    assert refused.exit_code == 3  # reading the fleet needs a valid token


def run_nodes(settings: Settings, tmp_path: Path) -> tuple[list[dict], str, str, Result]:
    boot = cardflow("token", "bootstrap", "root", "--reason", "first admin",
                    CARDFLOW_DATABASE_URL=settings.database_dsn or "", CARDFLOW_DATA_DIR=str(tmp_path))  # fmt: skip
    assert boot.exit_code == 0, boot.output
    with serving_console(settings) as url:
        made = cardflow("token", "create", "sam", "--role", "submitter", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=boot.stdout.strip())
        as_sam = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": made.stdout.strip()}
        listed = cardflow("nodes", "--json", **as_sam)
        assert listed.exit_code == 0, listed.output
        table = cardflow("nodes", **as_sam)
        table_zh = cardflow("nodes", "--lang", "zh", **as_sam)
        only_lost = cardflow("nodes", "--state", "lost", "--json", **as_sam)
        assert [row["node_id"] for row in json.loads(only_lost.stdout)] == ["l40s-b"]
        refused = cardflow("nodes", CARDFLOW_API_URL=url)
    return json.loads(listed.stdout), table.stdout, table_zh.stdout, refused
