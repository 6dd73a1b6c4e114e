"""`cardflow round close|note|list|show|compare`: thin clients of `/v1/rounds*`.

An operator closes the open round with a one-line retrospective note (amendable; every version kept);
anyone reads the reports and compares two rounds. Rich tables (English or `--lang zh`) or `--json`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption
from services.cli.report_tables import LABELS, JsonOption, ReasonOption, at_text, console, emit_json, table
from services.cli.review import print_flagged
from services.ledger.review_reasons import verdict_label


def register(app: typer.Typer) -> None:
    """Attach `round close|note|list|show|compare`."""
    rounds = typer.Typer(help="Accounting rounds: close with a note, amend it, list, show, compare.", no_args_is_help=True)
    app.add_typer(rounds, name="round")
    for name, command in (("close", close), ("note", note), ("list", list_rounds), ("show", show), ("compare", compare)):
        rounds.command(name)(command)


NoteOption = Annotated[str, typer.Option("--note", help="the one-line retrospective: which allocation was worth it")]


def close(note: NoteOption, reason: ReasonOption = "", as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Close the open round now (operator): the report goes to PostgreSQL and the reports bucket."""
    with cli_api(lang) as api:
        closed = api.post("/v1/rounds/close", {"note": note, "reason": reason})
    if as_json:
        emit_json(closed)
        return
    print_round(closed, lang)


def note(
    round_id: Annotated[str, typer.Argument(help="e.g. R0003")], text: NoteOption, reason: ReasonOption = "",
    lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Amend a round's note (operator); every earlier version is kept."""
    with cli_api(lang) as api:
        answer = api.post(f"/v1/rounds/{round_id}/note", {"note": text, "reason": reason})
    console.print(LABELS[lang.value]["note_saved"].format(round=answer["round_id"], version=answer["version"]))


def list_rounds(as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Closed rounds, oldest first."""
    with cli_api(lang) as api:
        rows = api.get("/v1/rounds")
    if as_json:
        emit_json(rows)
        return
    console.print(table(lang, "rounds", ["round", "from", "to", "gpu_hours", "cost", "output", "closed_by", "note"],
                        [[r["round_id"], at_text(r["starts_at"]), at_text(r["ends_at"]), r["gpu_hours"], r["cost"],
                          r["output_units"], r["closed_by"], r["note"]] for r in rows]))  # fmt: skip


def show(round_id: Annotated[str, typer.Argument(help="e.g. R0003")], as_json: JsonOption = False,
         lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """One round's report: totals, spend against output by project, scenario and card, the review."""
    with cli_api(lang) as api:
        found = api.get(f"/v1/rounds/{round_id}")
    if as_json:
        emit_json(found)
        return
    print_round(found, lang)


def print_round(found: dict[str, Any], lang: CliLang) -> None:
    report = found["report"]
    said = LABELS[lang.value]
    console.print(said["round_headline"].format(round=found["round_id"], starts=at_text(found["starts_at"]), ends=at_text(found["ends_at"]),
                                                by=found["closed_by"], note=found["note"]))  # fmt: skip
    if found.get("report_uri"):
        console.print(said["report_at"].format(uri=found["report_uri"]))
    console.print(table(lang, "totals", ["key", "result"], [[k, v] for k, v in report["totals"].items()]))
    for grouping in ("project", "scenario", "card"):
        console.print(table(lang, f"by {grouping}", ["key", "tasks", "gpu_hours", "cost", "output", "cost_per_unit"],
                            [[r["key"], r["tasks"], r["gpu_hours"], r["cost"], r["output_units"], r["cost_per_output_unit"]]
                             for r in report[f"by_{grouping}"]]))  # fmt: skip
    counts = report["review"]["counts"]
    console.print(LABELS[lang.value]["match_review"] + ": "
                  + ", ".join(f"{verdict_label(k, lang)} {v}" for k, v in counts.items()))  # fmt: skip
    print_flagged(report.get("flagged", []), lang)
    for version in found.get("notes", [])[1:]:
        console.print(said["note_version"].format(version=version["version"], actor=version["actor"], note=version["note"]))


def compare(first: Annotated[str, typer.Argument()], second: Annotated[str, typer.Argument()],
            as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Two rounds side by side: totals, and spend per project and card type, with the change."""
    with cli_api(lang) as api:
        result = api.get("/v1/rounds/compare", first=first, second=second)
    if as_json:
        emit_json(result)
        return
    console.print(table(lang, f"{first} → {second}", ["key", "first", "second", "change"],
                        [[k, v["first"], v["second"], v["change"]] for k, v in result["totals"].items()]))  # fmt: skip
    for grouping in ("project", "card"):
        console.print(table(lang, f"cost by {grouping}", ["key", "first", "second", "change"],
                            [[k, v["cost"]["first"], v["cost"]["second"], v["cost"]["change"]]
                             for k, v in result[f"by_{grouping}"].items()]))  # fmt: skip

