"""`cardflow config history|apply|set|rollback|diff` and `template list` in Chinese (`--lang zh`):
the tables and answers rendered from the API's rows (pure; the HTTP side is tests/integration/config)."""

from __future__ import annotations

import pytest
from rich.console import Console

from services.cli.config_commands import history_table, print_change, templates_table
from services.cli.lang import CliLang

VERSIONS = [
    {"version": 1, "at": "2026-12-01T08:00:00+00:00", "actor": "service:config", "action": "seeded", "reason": "first",
     "rolled_back_to": None, "sha256": "a" * 64, "s3_version_id": "v1"},
    {"version": 2, "at": "2026-12-01T09:00:00+00:00", "actor": "user:ops", "action": "set", "reason": "core waits less",
     "rolled_back_to": None, "sha256": "b" * 64, "s3_version_id": "v2"},
    {"version": 3, "at": "2026-12-01T10:00:00+00:00", "actor": "user:ops", "action": "rolled_back", "reason": "slipped",
     "rolled_back_to": 1, "sha256": "a" * 64, "s3_version_id": "v3"},
]  # fmt: skip


def rendered(table: object) -> str:
    console = Console(record=True, width=220)
    console.print(table)
    return " ".join(console.export_text().split())


def test_the_history_in_english_and_chinese() -> None:
    assert "policy: 3 version(s)" in rendered(history_table("policy", VERSIONS))
    assert "rolled back to v1" in rendered(history_table("policy", VERSIONS))
    chinese = rendered(history_table("policy", VERSIONS, lang=CliLang.ZH))
    assert "policy：共 3 个版本" in chinese and "操作者" in chinese and "初始导入" in chinese
    assert "修改键值" in chinese and "回滚到第 1 版" in chinese and "rolled" not in chinese


def test_a_change_says_which_version_is_in_force(capsys: pytest.CaptureFixture[str]) -> None:
    answer = {"name": "policy", "version": 4, "action": "applied", "actor": "user:ops", "reason": "launch",
              "s3_version_id": "v4", "diff": "-a\n+b\n"}  # fmt: skip
    print_change(answer, CliLang.ZH)
    out, err = capsys.readouterr()
    assert out == "-a\n+b\n"  # the diff is the diff
    assert "policy 第 4 版已生效（user:ops 应用：launch）" in err


def test_templates_in_chinese() -> None:
    rows = [{"name": "templates/eval", "version": 2, "at": "2026-12-01T10:00:00", "actor": "user:ops", "reason": "nightly"}]
    assert "templates (1)" in rendered(templates_table(rows))
    chinese = rendered(templates_table(rows, CliLang.ZH))
    assert "模板（1 个）" in chinese and "最新版本" in chinese and "eval" in chinese
