"""`cardflow submit` / `cardflow cancel` as a user runs them (a subprocess): clients of the console's
API (served in a thread), with intake and the task views running in-process on real servers."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import yaml
from redis.asyncio import Redis

from services.console.projector import SPEC as VIEWS
from services.intake.service import SPEC as INTAKE
from services.matcher.service import SPEC as MATCHER
from services.readiness.service import SPEC as READINESS
from shared.settings import Settings
from tests.helpers.console_server import first_admin, issue_token, serving_console
from tests.helpers.delivery_support import REPO_ROOT
from tests.helpers.running_services import RunningServices
from tests.integration.intake.harness import a_submission, published_events


async def cardflow(url: str, token: str, *args: str) -> tuple[int, str]:
    """Run `cardflow ARGS` against the API at `url` with `token`; its exit code and output."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env |= {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, cwd=REPO_ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode()


async def a_submitter(settings: Settings, project: str = "proj-a") -> str:
    return await issue_token(settings, await first_admin(settings), "sam", "submitter", project)


async def test_submitting_a_file_twice_creates_each_task_once(fresh_settings: Settings, redis: Redis, tmp_path: Path) -> None:
    file = tmp_path / "tasks.yaml"
    file.write_text(yaml.safe_dump([a_submission("keyed", idempotency_key="mine-1"), a_submission("keyless")]))
    sam = await a_submitter(fresh_settings)
    async with RunningServices(fresh_settings, INTAKE):
        with serving_console(fresh_settings) as url:
            first = await cardflow(url, sam, "submit", str(file))
            again = await cardflow(url, sam, "submit", str(file))
            zh = await cardflow(url, sam, "submit", str(file), "--lang", "zh")
            new = await cardflow(url, sam, "submit", str(file), "--new")

            async def relayed() -> bool:
                return len(await published_events(redis, "task.submitted")) == 3

            await asyncio.wait_for(_until(relayed), timeout=60)

    assert first[0] == 0 and again[0] == 0 and new[0] == 0, first[1] + again[1] + new[1]
    assert "keyless" in first[1] and "mine-1" in first[1] and first[1].count("created") == 2
    assert again[1].count("already submitted as") == 2 and "created" not in again[1]
    assert again[1].count("--new to submit again") == 1  # the derived key; a key of its own must be changed
    assert again[1].count("(same") == 1  # the rest of the sentence may wrap in the table
    assert zh[0] == 0 and "提交结果" in zh[1] and "幂等键" in zh[1] and zh[1].count("已提交过，任务为") == 2, zh[1]
    assert "用 --new 再次提交" in zh[1] and "already" not in zh[1]
    assert new[1].count("created") == 1 and new[1].count("already submitted as") == 1  # --new: the keyless one again
    submitted = await published_events(redis, "task.submitted")
    keys = sorted(e.data.idempotency_key for e in submitted)
    assert keys[0].startswith("cli-") and keys[1].startswith("cli-") and keys[0] != keys[1] and keys[2] == "mine-1"
    assert {e.actor for e in submitted} == {"user:sam"}


async def _until(condition) -> None:  # type: ignore[no-untyped-def]
    while not await condition():
        await asyncio.sleep(0.1)


async def test_wait_reports_a_rejected_task_and_exits_non_zero(fresh_settings: Settings, tmp_path: Path) -> None:
    file = tmp_path / "bad.json"
    file.write_text(json.dumps(a_submission("bad", gpus=0)))
    sam = await a_submitter(fresh_settings)
    async with RunningServices(fresh_settings, INTAKE, VIEWS):
        with serving_console(fresh_settings) as url:
            code, output = await cardflow(url, sam, "submit", str(file), "--wait", "--timeout", "120")
            zh_code, zh_output = await cardflow(url, sam, "submit", str(file), "--lang", "zh")

    assert code == 1, output
    assert "rejected" in output and "gpus" in output
    assert zh_code == 1 and "已拒绝" in zh_output and "gpus：收到 0，应为" in zh_output and "（原文）" in zh_output, zh_output


async def test_wait_stops_with_exit_4_when_no_card_type_fits(fresh_settings: Settings, tmp_path: Path) -> None:
    file = tmp_path / "huge.json"
    file.write_text(json.dumps(a_submission("huge", min_vram_gb=4000)))
    sam = await a_submitter(fresh_settings)
    async with RunningServices(fresh_settings, INTAKE, READINESS, MATCHER, VIEWS):
        with serving_console(fresh_settings) as url:
            code, output = await cardflow(url, sam, "submit", str(file), "--wait", "--timeout", "300")
            zh_code, zh_output = await cardflow(url, sam, "submit", str(file), "--wait", "--lang", "zh")

    assert code == 4, output  # not the timeout (2): it says at once that a person must act
    assert "unmatchable (stuck)" in output and "cannot go on until a person acts" in output
    assert zh_code == 4 and "无可用卡型（需人工处理）" in zh_output and "需要有人处理才能继续" in zh_output, zh_output
    assert "没有任何允许的卡型有足够的单卡显存" in zh_output, zh_output  # the story's Chinese sentence, not only the name


async def test_cancel_and_a_refusal_naming_the_missing_role(fresh_settings: Settings, redis: Redis, tmp_path: Path) -> None:
    file = tmp_path / "task.json"
    file.write_text(json.dumps(a_submission("to-cancel", idempotency_key="cancel-me")))
    admin = await first_admin(fresh_settings)
    sam = await issue_token(fresh_settings, admin, "sam", "submitter", "proj-a")
    olga = await issue_token(fresh_settings, admin, "olga", "submitter", "proj-b")
    async with RunningServices(fresh_settings, INTAKE):
        with serving_console(fresh_settings) as url:
            code, output = await cardflow(url, sam, "submit", str(file))
            assert code == 0, output
            task_id = next(line.split("│")[6].strip() for line in output.splitlines() if "cancel-me" in line)
            code, output = await cardflow(url, olga, "cancel", task_id, "--reason", "not mine")
            assert code == 3 and output == (
                "error: forbidden: this needs role submitter for project proj-a (or operator, admin); token 'olga'"
                " (submitter for project proj-b) does not have it\n"
            ), output
            code, output = await cardflow(url, sam, "cancel", "NOPE", "--reason", "typo")
            assert code == 1 and "no task has the id, idempotency key or name 'NOPE'" in output, output
            code, output = await cardflow(url, sam, "cancel", "cancel-me", "--reason", "wrong data")  # by its key
            assert code == 0 and f"cancel of {task_id} (cancel-me) requested" in output, output
            code, output = await cardflow(url, sam, "cancel", task_id, "--reason", "again", "--lang", "zh")
            assert code == 0 and f"已请求取消任务 {task_id}" in output, output

            async def relayed() -> bool:
                return len(await published_events(redis, "task.cancel_requested")) == 2

            await asyncio.wait_for(_until(relayed), timeout=60)
    cancels = await published_events(redis, "task.cancel_requested")
    assert [(c.actor, c.data.task_id, c.data.reason) for c in cancels] == [("user:sam", task_id, "wrong data"),
                                                                          ("user:sam", task_id, "again")]


async def test_an_unreadable_file_is_refused_before_anything_is_sent(fresh_settings: Settings, tmp_path: Path) -> None:
    file = tmp_path / "broken.json"
    file.write_text("[{]")
    code, output = await cardflow("http://127.0.0.1:9", "cfk_unused", "submit", str(file))
    assert code == 2 and "not valid JSON" in output
    code, output = await cardflow("http://127.0.0.1:9", "cfk_unused", "submit", str(file), "--lang", "zh")
    assert code == 2 and "无法读取提交文件" in output and "not valid JSON" in output
