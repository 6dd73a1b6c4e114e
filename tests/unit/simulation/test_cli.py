"""`cardflow simulate` end to end on a tiny native trace: options, JSON file, plot file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app

TRACE = """task_id,submit_s,gpus,duration_s,estimate_s,priority_class,project,card_type
a,0,2,100,,standard,p,
b,10,3,50,,,p,
c,20,1,30,,core,q,T4
d,30,2,200,400,,q,
"""


def test_simulate_writes_json_and_plot(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    result = CliRunner().invoke(app, [
        "simulate", "--trace", str(trace), "--cluster", "T4:1x4", "--policy", "cardflow",
        "--policy", "fifo", "--synthesize", "--json", str(out), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert list(document["policies"]) == ["cardflow", "fifo"]
    assert document["synthesis"]["seed"] == 42
    assert document["cluster"] == "T4:1x4"
    assert png.stat().st_size > 0
    assert "utilisation" in result.output


def test_simulate_takes_an_explicit_seed_and_rejects_unknown_policies(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    out = tmp_path / "r.json"
    runner = CliRunner()
    ok = runner.invoke(app, ["simulate", "--trace", str(trace), "--cluster", "T4:1x4", "--synthesize", "7",
                             "--policy", "easy-backfill", "--json", str(out)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(out.read_text())["synthesis"]["seed"] == 7
    bad = runner.invoke(app, ["simulate", "--trace", str(trace), "--policy", "round-robin"])
    assert bad.exit_code != 0
    assert "round-robin" in bad.output
    bad_zh = runner.invoke(app, ["simulate", "--trace", str(trace), "--policy", "round-robin", "--lang", "zh"])
    assert bad_zh.exit_code != 0 and "未知策略 round-robin" in bad_zh.output


def test_a_malformed_trace_is_a_clear_error(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("task_id,submit_s\na,0\n")
    result = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--cluster", "T4:1x4"])
    assert result.exit_code != 0
    assert "duration_s" in result.output


def test_simulate_prints_the_deadlines_met_and_missed_and_names_the_missed_task(tmp_path: Path) -> None:
    """`late` cannot end before 200 (the node is busy until 100 and it runs 100 s): its deadline 150
    is provably missed; `met` ends at 300, before its deadline 350."""
    trace = tmp_path / "trace.csv"
    trace.write_text("task_id,submit_s,gpus,duration_s,estimate_s,priority_class,project,card_type,deadline_s\n"
                     "busy,0,4,100,100,standard,p,T4,\n"
                     "late,10,4,100,100,standard,p,T4,150\n"
                     "met,20,4,100,100,standard,p,T4,350\n")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--cluster", "T4:1x4", "--policy", "cardflow",
                                      "--json", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    deadlines = json.loads(out.read_text())["policies"]["cardflow"]["deadlines"]
    assert (deadlines["met"], deadlines["missed"]) == (1, 1)
    assert [row["task_id"] for row in deadlines["missed_tasks"]] == ["late"]
    assert "deadlines met / missed" in result.output and "1 / 1" in result.output
    assert "cardflow: 1 missed their deadline: late (50s late)" in result.output
    in_chinese = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--cluster", "T4:1x4", "--policy", "cardflow",
                                          "--json", str(out), "--lang", "zh"], env={"COLUMNS": "200"})  # fmt: skip
    assert in_chinese.exit_code == 0, in_chinese.output
    assert "截止时间 达成 / 错过" in in_chinese.output and "等待 核心 均值 / p95" in in_chinese.output
    assert "个任务已完成" in in_chinese.output and "tasks done" not in in_chinese.output  # the progress bar's label
    assert "cardflow：1 个任务错过截止时间：late（晚了 50s）" in in_chinese.output
    assert "JSON 报告已写入" in in_chinese.output and "deadlines met" not in in_chinese.output
