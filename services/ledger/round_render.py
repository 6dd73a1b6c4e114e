"""A round report as files (pure): CSV rows, the JSON document, and an HTML page with plots.

- `report.json` — the report as `build_round_report` made it;
- `report.csv` — one row per (grouping, key): task, project, scenario, card type; spend, output,
  cost per output unit; then one `flagged` row per flagged success (key = the task, `output_units` =
  the output held back, counted in no row above);
- `report.html` — one self-contained page (inline SVG, no scripts): totals, three plots (spend by
  project, cost per output unit by card type, the trend against earlier rounds), the tables, the
  match review (each reason in English and 中文); headings in English and 中文.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Sequence
from typing import Any

from services.console.labels import REASON_LABELS_ZH
from services.ledger.review_reasons import review_reason_text, verdict_label
from services.ledger.round_report import GROUPINGS

REVIEW_COLUMNS = ("task_id", "ran_on", "runtime_h", "simulated", "ratio", "util_pct", "cost_per_output_unit", "verdict",
                  "reason", "理由")
"""The match review table of the HTML page: `runtime_h` in the agent's time, `simulated` ("simulated xN"
on a scaled agent), `util_pct` the time-weighted mean GPU utilisation; the verdict with its Chinese
label, the reason in English and (理由) in Chinese, rendered from its facts."""
CSV_COLUMNS = ("grouping", "key", "tasks", "leases", "gpu_hours", "cost", "output_units", "output_unit", "cost_per_output_unit")


def report_json(report: dict[str, Any]) -> bytes:
    return json.dumps(report, ensure_ascii=False, indent=1, sort_keys=True).encode()


def report_csv(report: dict[str, Any]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for grouping in GROUPINGS:
        writer.writerows(report[f"by_{grouping}"])
    writer.writerows({"grouping": "flagged", "key": run["task_id"], "tasks": 1, "output_units": run["output_units"],
                      "output_unit": run["output_unit"]} for run in report.get("flagged", []))  # fmt: skip
    return out.getvalue().encode()


def report_html(report: dict[str, Any], note: str, closed_by: str) -> bytes:
    t = report["totals"]
    plots = [
        _bar_svg([r["key"] for r in report["by_project"]], [r["cost"] for r in report["by_project"]],
                 "Spend by project · 各项目花费", "cost"),
        _bar_svg([r["key"] for r in report["by_card"] if r["cost_per_output_unit"] is not None],
                 [r["cost_per_output_unit"] for r in report["by_card"] if r["cost_per_output_unit"] is not None],
                 "Cost per output unit by card type · 各卡型单位产出成本", "cost / unit"),
        _trend_svg(report["trend"]),
    ]  # fmt: skip
    sections = [
        f"<h1>Round {html.escape(report['round_id'])} · 结算周期</h1>",
        f"<p>{html.escape(report['starts_at'])} – {html.escape(report['ends_at'])}; closed by {html.escape(closed_by)}</p>",
        f"<blockquote>{html.escape(note)}</blockquote>",
        _table("Totals · 合计", [{"measure": k, "value": v} for k, v in t.items()]),
        '<div class="plots">' + "".join(plots) + "</div>",
        *(_table(f"By {g} · 按{_ZH[g]}", report[f"by_{g}"], CSV_COLUMNS[1:]) for g in GROUPINGS),
        _table("Idle GPU-hours · 闲置 GPU 小时", report["idle_by_card"]),
        _table("Preemption losses · 抢占损失", report["preemption_losses"]),
        _table("Estimate against actual · 预估与实际", report["estimates"]),
        _table("Match review · 匹配复盘", [_review_row(r) for r in report["review"]["tasks"]]),
        _table("Runtime ratio per card type and profile · 各卡型/负载类型的实际/预估比", report["review"]["speed_corrections"]),
        _table("Flagged successes, output not counted · 被标记的成功（产出不计入）",
               [_flagged_row(run) for run in report.get("flagged", [])]),
    ]  # fmt: skip
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>cardflow round {html.escape(report['round_id'])}</title>{_STYLE}</head><body>{''.join(sections)}</body></html>"
    return page.encode()


def _review_row(review: dict[str, Any]) -> dict[str, Any]:
    row = {**review, "runtime_h": review["runtime_s"] / 3600, "理由": review_reason_text(review, "zh"),
           "verdict": f"{review['verdict']} · {verdict_label(review['verdict'], 'zh')}"}  # fmt: skip
    return {name: row.get(name) for name in REVIEW_COLUMNS}


FLAGGED_COLUMNS = ("task_id", "name", "project", "flags", "标记", "output_units", "claimed_output_units", "detail")
"""The flagged successes' table: `output_units` is the output held back, `claimed_output_units` a claim
refused as out of bounds; `标记` the flags in Chinese."""


def _flagged_row(run: dict[str, Any]) -> dict[str, Any]:
    row = {**run, "flags": ", ".join(run["flags"]), "标记": "，".join(REASON_LABELS_ZH.get(f, f) for f in run["flags"])}
    return {name: row.get(name) for name in FLAGGED_COLUMNS}


_ZH = {"task": "任务", "project": "项目", "scenario": "场景", "card": "卡型"}
_STYLE = (
    "<style>body{font-family:system-ui,'Noto Sans CJK SC',sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}"
    "td:first-child,th:first-child{text-align:left}.plots svg{width:32%;height:auto;display:inline-block}</style>"
)


def _table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return f"<h2>{html.escape(title)}</h2><p>none · 无</p>"
    names = list(columns or rows[0].keys())
    head = "".join(f"<th>{html.escape(name)}</th>" for name in names)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(row.get(n)))}</td>" for n in names) + "</tr>" for row in rows)
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 100 else f"{value:,.2f}"
    return str(value)


def _figure() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3.2))
    return plt, figure, axes


def _svg(plt: Any, figure: Any) -> str:
    out = io.StringIO()
    figure.tight_layout()
    figure.savefig(out, format="svg", metadata={"Date": None})
    plt.close(figure)
    text = out.getvalue()
    return text[text.index("<svg"):]


def _bar_svg(labels: Sequence[str], values: Sequence[float], title: str, ylabel: str) -> str:
    plt, figure, axes = _figure()
    axes.bar(list(labels) or ["–"], list(values) or [0.0], color="#4c78a8")
    axes.set_title(title.split(" · ")[0])
    axes.set_ylabel(ylabel)
    axes.tick_params(axis="x", labelrotation=30)
    return _svg(plt, figure)


def _trend_svg(trend: Sequence[dict[str, Any]]) -> str:
    plt, figure, axes = _figure()
    names = [row["round_id"] for row in trend]
    axes.plot(names, [row["cost"] for row in trend], marker="o", color="#e45756", label="cost")
    axes.set_ylabel("cost")
    hours = axes.twinx()
    hours.plot(names, [row["gpu_hours"] for row in trend], marker="s", color="#4c78a8", label="GPU-hours")
    hours.set_ylabel("GPU-hours")
    axes.set_title("Trend against earlier rounds")
    axes.tick_params(axis="x", labelrotation=30)
    return _svg(plt, figure)
