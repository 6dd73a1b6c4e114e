"""`cardflow simulate`: replay a GPU trace under one or more policies and compare them.

Every decision comes from the production scheduling core (`shared.scheduling.plan.plan`); see
docs/simulation.md for events and metrics, docs/traces.md for the formats. `--lang zh` (or
`CARDFLOW_LANG=zh`) prints the table, the missed deadlines and the answers in Chinese; the JSON
report and the plot are the same in both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from typer.core import TyperCommand

from services.cli.lang import CliLang, LangOption
from shared.simulation.synthesize import DEFAULT_SEED

FORMATS = ("native", "philly", "openb", "sacct")
DEFAULT_POLICIES = ("cardflow", "fifo", "priority", "easy-backfill")

WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "scenario_line": "[bold]{trace}[/]: {n} tasks on {fleet} ({description})",
        "json_written": "JSON written to {path}", "plot_written": "plot written to {path}",
        "plot_title": "{trace} on {description}", "format": "choose one of {formats}",
        "unreadable": "cannot read {trace} as {fmt}: {error}", "unknown_policy": "unknown {names}; choose from {known}",
        "scenario": "scenario: {json}", "notes": "trace notes: {json}", "synthesis": "synthesized with: {json}",
        "tasks_done": "tasks done",
    },
    CliLang.ZH: {
        "scenario_line": "[bold]{trace}[/]：{n} 个任务，集群 {fleet}（{description}）",
        "json_written": "JSON 报告已写入 {path}", "plot_written": "图已写入 {path}",
        "plot_title": "{trace} on {description}", "format": "请从 {formats} 中选一个",
        "unreadable": "无法按 {fmt} 格式读取 {trace}：{error}（原文）", "unknown_policy": "未知策略 {names}；可选：{known}",
        "scenario": "场景：{json}", "notes": "轨迹说明：{json}", "synthesis": "合成参数：{json}",
        "tasks_done": "个任务已完成",
    },
}  # fmt: skip
"""simulate's own words per language (the table's are `shared.simulation.report.LABELS`; the plot stays in English:
its font may have no Chinese glyphs; the progress bars' rows are the policies' names)."""


class _OptionalSeedCommand(TyperCommand):
    """Lets `--synthesize` stand alone (seed 42) or take a seed: `--synthesize 7`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        patched: list[str] = []
        for index, arg in enumerate(args):
            patched.append(arg)
            following = args[index + 1] if index + 1 < len(args) else None
            if arg == "--synthesize" and (following is None or following.startswith("-")):
                patched.append(str(DEFAULT_SEED))
        return super().parse_args(ctx, patched)


def simulate(
    trace: Path = typer.Option(..., "--trace", exists=True, dir_okay=False, help="Trace file to replay."),
    fmt: str = typer.Option("native", "--format", help="native | philly | openb | sacct"),
    cluster: Optional[str] = typer.Option(
        None, "--cluster", help="Fleet: spec like H100:16x8,A100-80G:8x8, or a CSV node_id,card_type,gpus. "
        "Default: the trace's node list, else 8-GPU nodes of the trace's card sized for 100% offered load."),
    policy: Optional[list[str]] = typer.Option(None, "--policy", help="Policy preset; repeat to compare."),
    synthesize: Optional[int] = typer.Option(
        None, "--synthesize", metavar="[SEED]",
        help=f"Fill missing classes/estimates/readiness/checkpoints from seeded draws (seed {DEFAULT_SEED})."),
    quota: Optional[Path] = typer.Option(
        None, "--quota", exists=True, help="Quota CSV project,gpu_hours,valid_from_s,valid_to_s."),
    synthesize_quota: bool = typer.Option(
        False, "--synthesize-quota", help="One quota account per project (docs/traces.md), to count cut-offs."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the JSON report here."),
    plot_out: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG of utilisation and queue length."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N tasks by submit time."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Run policies in this many worker processes."),
    lang: LangOption = CliLang.EN,
) -> None:
    """Replay TRACE on a simulated fleet under each policy; print a side-by-side table."""
    from shared.simulation.matching import CatalogCardModel
    from shared.simulation.report import comparison_table, missed_deadline_lines, plot, write_json
    from shared.simulation.runner import build_document, new_progress, prepare_scenario, run_policies
    from shared.simulation.traces import load_trace

    console, words = Console(), WORDS[lang]
    if fmt not in FORMATS:
        raise typer.BadParameter(words["format"].format(formats=", ".join(FORMATS)), param_hint="--format")
    chosen = _policies(policy or list(DEFAULT_POLICIES), words)
    card_model = CatalogCardModel()
    fleet = _cluster(cluster)
    try:
        scenario = prepare_scenario(load_trace(trace, fmt), card_model, cluster=fleet,
                                    synthesize_seed=synthesize, quota_csv=quota,
                                    synthesize_quota=synthesize_quota, limit=limit)
    except (ValueError, KeyError) as error:
        raise typer.BadParameter(words["unreadable"].format(trace=trace, fmt=fmt, error=error), param_hint="--trace") from error
    console.print(words["scenario_line"].format(trace=scenario.trace.name, n=len(scenario.tasks), fleet=scenario.cluster.summary(),
                                                description=scenario.cluster.description))  # fmt: skip
    with new_progress(words["tasks_done"]) as progress:
        outcomes = run_policies(scenario, chosen, progress=progress, jobs=jobs)
    document = build_document(scenario, outcomes)
    console.print(comparison_table(document, lang=lang.value))
    for line in missed_deadline_lines(document, lang=lang.value):
        console.print(line, markup=False, highlight=False)
    _print_context(console, document, words)
    if json_out:
        write_json(document, json_out)
        console.print(words["json_written"].format(path=json_out))
    if plot_out:
        title = words["plot_title"].format(trace=scenario.trace.name, description=scenario.cluster.description)
        plot(outcomes, scenario.cluster.capacity, plot_out, title=title)
        console.print(words["plot_written"].format(path=plot_out))


def _policies(names: list[str], words: dict[str, str]) -> list[Any]:
    from shared.scheduling.policies import POLICIES

    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        raise typer.BadParameter(words["unknown_policy"].format(names=", ".join(unknown), known=", ".join(POLICIES)),
                                 param_hint="--policy")  # fmt: skip
    return [POLICIES[name] for name in dict.fromkeys(names)]


def _cluster(spec: str | None) -> Any:
    from shared.simulation.cluster import load_cluster

    if spec is None:
        return None
    try:
        return load_cluster(spec)
    except (ValueError, OSError, KeyError) as error:
        raise typer.BadParameter(str(error), param_hint="--cluster") from error


def _print_context(console: Console, document: dict[str, Any], words: dict[str, str]) -> None:
    console.print(words["scenario"].format(json=json.dumps(document["scenario"], ensure_ascii=False)))
    console.print(words["notes"].format(json=json.dumps(document["trace_notes"], ensure_ascii=False)))
    if document["synthesis"]:
        console.print(words["synthesis"].format(json=json.dumps(document["synthesis"], ensure_ascii=False)))


def register(app: typer.Typer) -> None:
    """Attach `cardflow simulate`."""
    app.command("simulate", cls=_OptionalSeedCommand)(simulate)
