"""`cardflow config what-if policy FILE [--days N]`: replay the last N days under the proposal first.

Reads the policy and card catalog in force and this installation's own workload of the last N
days through the API, replays it locally in the simulator (the same `plan()` the dispatcher runs)
under both policies with a progress bar, and prints the measures side by side with a one-line
verdict. `--apply --reason TEXT` then applies FILE, based on the version that was compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()
errors = Console(stderr=True, soft_wrap=True)


def what_if(
    name: Annotated[str, typer.Argument(help="the document to try: policy")],
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the proposed policy (YAML)")],
    days: Annotated[float, typer.Option("--days", min=0.01, max=90, help="replay this many days of history")] = 7.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    apply_it: Annotated[bool, typer.Option("--apply", help="apply FILE afterwards (needs --reason)")] = False,
    reason: Annotated[str, typer.Option("--reason", help="why; required with --apply")] = "",
) -> None:
    """Replay this installation's last N days under the policy in force and under FILE; show the deltas."""
    from shared.config import POLICY, DocumentInvalid, catalog_of, parse_document_name, scheduling_policy
    from shared.config import strip_version_header, validate_document
    from shared.config.what_if import compare, verdict, workload_tasks

    if parse_document_name(name) != POLICY:
        raise typer.BadParameter("what-if replays policies only: use `policy`", param_hint="NAME")
    if apply_it and not reason:
        raise typer.BadParameter("--apply needs --reason", param_hint="--reason")
    text, _ = strip_version_header(file.read_text(encoding="utf-8"))
    try:
        proposal = validate_document(POLICY, text).model
    except DocumentInvalid as invalid:
        errors.print(f"[red]error:[/red] {invalid}")
        raise typer.Exit(1) from None
    with cli_api() as api:
        current_doc = api.get("/v1/config/show", name="policy")
        cards = api.get("/v1/config/show", name="cards")
        workload = api.get("/v1/workload", days=days)
    catalog = catalog_of(validate_document(parse_document_name("cards"), cards["content"]).model, cards["version"])
    current = scheduling_policy(validate_document(POLICY, current_doc["content"]).model, name=f"policy v{current_doc['version']}")
    tasks, fleet = workload_tasks(workload, catalog)
    if not tasks or not fleet.nodes:
        errors.print(f"nothing to replay: {len(tasks)} task(s) and {len(fleet.nodes)} node(s) in the last {days:g} days")
        raise typer.Exit(1)
    summaries = _replay_both(tasks, fleet, {"current": current, "proposed": scheduling_policy(proposal, name="proposed")}, catalog)
    rows = compare(summaries["current"], summaries["proposed"])
    sentence = verdict(rows, days, len(tasks))
    left_out = workload.get("left_out") or {}
    if as_json:
        print(json.dumps({"days": days, "tasks": len(tasks), "left_out": left_out, "current_version": current_doc["version"],
                          "measures": [_row_json(r) for r in rows], "verdict": sentence,
                          "current": summaries["current"], "proposed": summaries["proposed"]}, indent=2, default=str))
    else:
        console.print(_table(rows, current_doc["version"], days, len(tasks), fleet.summary()))
        if left_out:
            said = ", ".join(f"{count} {why}" for why, count in sorted(left_out.items()))
            console.print(f"Not replayed: {said} (docs/config.md#what-if).", style="dim")
        console.print(f"[bold]{sentence}[/bold]")
    if apply_it:
        from services.cli.config_commands import print_change

        with cli_api() as api:
            answer = api.post("/v1/config/apply", {"name": "policy", "content": text, "base": current_doc["version"],
                                                   "reason": reason})
        print_change(answer)


def _replay_both(tasks: list[Any], fleet: Any, policies: dict[str, Any], catalog: Any) -> dict[str, dict[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from shared.config.what_if import replay

    summaries = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=errors, transient=True) as progress:  # fmt: skip
        for label, policy in policies.items():
            bar = progress.add_task(f"replaying under the {label} policy", total=len(tasks))
            summaries[label] = replay(tasks, fleet, policy, catalog, lambda done, _now, bar=bar: progress.update(bar, completed=done))
            progress.update(bar, completed=len(tasks))
    return summaries


def _row_json(row: Any) -> dict[str, Any]:
    return {"measure": row.measure, "current": row.current, "proposed": row.proposed, "change": row.change,
            "unit": row.unit, "better": row.better}  # fmt: skip


def _table(rows: list[Any], version: int, days: float, tasks: int, fleet: str) -> Table:
    table = Table(title=f"what-if: policy v{version} (in force) vs proposed — last {days:g} days, {tasks} tasks, {fleet}")
    for column in ("measure", "in force", "proposed", "change"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for row in rows:
        style = "" if row.better is None else ("green" if row.better else "red")
        change = "=" if row.better is None else f"{row.change:+.3g}"
        unit = row.unit if row.unit != "tasks" else ""
        table.add_row(row.measure, f"{row.current:.3g} {unit}".strip(), f"{row.proposed:.3g} {unit}".strip(),
                      f"[{style}]{change}[/{style}]" if style else change)  # fmt: skip
    return table
