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


def test_a_malformed_trace_is_a_clear_error(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("task_id,submit_s\na,0\n")
    result = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--cluster", "T4:1x4"])
    assert result.exit_code != 0
    assert "duration_s" in result.output
