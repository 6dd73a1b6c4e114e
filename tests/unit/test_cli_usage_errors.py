"""Click's usage errors in Chinese with `--lang zh` / `CARDFLOW_LANG=zh`, unchanged in English, and the
exit codes the same in both (the real `cardflow` app, in-process; no API is reached by these cases)."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from services.cli.lang import CliLang
from services.cli.main import app
from services.cli.queue import queue_table
from services.cli.usage_errors import requested_lang


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed again: connections are refused
    base = {"CARDFLOW_LANG": "", "CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": "cfk_unused", "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=base | (env or {}), prog_name="cardflow")
    return result.exit_code, result.output


@pytest.mark.parametrize(("args", "env", "lang"), [
    (["queue", "--lang", "zh"], {}, CliLang.ZH),
    (["queue", "--lang=zh"], {}, CliLang.ZH),
    (["queue"], {"CARDFLOW_LANG": "zh"}, CliLang.ZH),
    (["queue", "--lang", "en"], {"CARDFLOW_LANG": "zh"}, CliLang.EN),  # the option wins over the variable
    (["queue", "--lang", "fr"], {}, CliLang.EN),  # click then says what is wrong with it
    (["queue", "--lang"], {}, CliLang.EN),
    (["submit", "--", "--lang", "zh"], {}, CliLang.EN),  # after --, a file name
])  # fmt: skip
def test_the_language_is_read_before_click_parses(args: list[str], env: dict[str, str], lang: CliLang) -> None:
    assert requested_lang(args, env) is lang


@pytest.mark.parametrize(("args", "english", "chinese"), [
    (["submit"], "Missing argument 'file'", "缺少参数 'file'"),
    (["tasks", "--limit", "abc"], "Invalid value for '--limit'", "'--limit' 的值无效（原文："),
    (["queue", "--bogus"], "No such option: --bogus", "没有这个选项：--bogus"),
    (["sumbit"], "No such command 'sumbit'", "没有这个命令：sumbit。是否想用：submit"),
    (["cancel", "T1", "--reason"], "Option '--reason' requires an argument", "选项 --reason 用法有误（原文："),
])  # fmt: skip
def test_usage_errors_are_told_in_chinese_with_the_same_exit_code(args: list[str], english: str, chinese: str) -> None:
    en_code, en_output = _run(*args)
    zh_code, zh_output = _run(*args, env={"CARDFLOW_LANG": "zh"})
    assert en_code == zh_code == 2, (en_output, zh_output)
    assert english in en_output, en_output
    assert chinese in zh_output and "Usage:" not in zh_output and "Error" not in zh_output, zh_output
    assert ("Usage:" in en_output) == ("用法：" in zh_output) == ("查看帮助" in zh_output), (en_output, zh_output)


def test_a_commands_own_exit_code_is_kept_in_chinese() -> None:
    en_code, en_output = _run("queue")
    zh_code, zh_output = _run("queue", "--lang", "zh")
    assert en_code == zh_code != 0, (en_output, zh_output)  # no API listens: the client's refusal, its code
    assert "cannot reach" in en_output or "connect" in en_output, en_output
    assert "错误" in zh_output, zh_output


def test_an_unknown_language_is_a_usage_error_not_a_traceback() -> None:
    code, output = _run("queue", "--lang", "fr")
    assert code == 2 and "'fr' is not one of 'en', 'zh'" in output and "Traceback" not in output, output


def test_the_queue_table_speaks_chinese() -> None:
    rows = [
        {"position": None, "name": "train", "id": "T1", "project": "nlp", "priority_class": "core", "priority": 5, "gpus": 8,
         "card_type": "H100", "est_runtime_s": 7200, "ready": True, "state": "running", "start_reason": "backfill",
         "passed": 3, "sentence": None, "reason": None},
        {"position": 1, "name": None, "id": "T2", "project": "cv", "priority_class": "standard", "priority": 0, "gpus": 1,
         "card_type": "L40S", "est_runtime_s": None, "ready": False, "state": "queued", "sentence": "等待 1 个输入",
         "reason": "data_not_ready", "estimated_start": None, "deadline_at_risk": True},
    ]  # fmt: skip
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(queue_table(rows, CliLang.ZH))
    text = console.export_text()
    assert "运行中 1 个，等待中 1 个" in text and "预计开始" in text and "已启动：backfill（越过 3 个等待任务）" in text
    assert "排队" in text and "queued" not in text, text  # the state by its Chinese name
    assert "⚠ 截止时间有风险" in text and "等待 1 个输入" in text
    console = Console(width=250, record=True)
    console.print(queue_table(rows))
    english = console.export_text()
    assert "1 running, 1 waiting" in english and "started: backfill past 3 waiting" in english and "queued" in english
