"""`cardflow audit verify|replay|why|log`: thin clients of `/v1/audit/*` for auditors.

Rich tables (English or `--lang zh`) or `--json`. `audit verify` exits 0 only when every check holds
(1 when one does not). Rounds are in services/cli/rounds.py, the match review in services/cli/review.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption
from services.cli.report_tables import LABELS, JsonOption, at_text, console, emit_json, reason_label, table
from services.cli.task_refs import TaskArgument, task_id_or_ref


def register(app: typer.Typer) -> None:
    """Attach `audit verify|replay|why|log`."""
    audit = typer.Typer(help="The audit archive: verify, replay, why a task, who changed what (auditor).",
                        no_args_is_help=True)  # fmt: skip
    app.add_typer(audit, name="audit")
    for name, command in (("verify", verify), ("replay", replay), ("why", why), ("log", log)):
        audit.command(name)(command)


def verify(
    settle: Annotated[float, typer.Option("--settle", help="seconds to re-check differences while services catch up")] = 15.0,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Check the hash chain, every segment in object storage, that nothing published is missing,
    and that replaying the archive rebuilds the live state; exit 0 only when all of it holds."""
    with cli_api(lang) as api:
        report = api.get("/v1/audit/verify", settle_s=settle)
    if as_json:
        emit_json(report)
    else:
        print_verify(report, lang)
    raise typer.Exit(0 if report["ok"] else 1)


def print_verify(report: dict[str, Any], lang: CliLang) -> None:
    said = LABELS[lang.value]
    console.print(table(lang, "audit verify", ["check", "result"], _verify_rows(report, said)))
    for problem in report["segments"]["problems"]:
        console.print(said["segment_problem"].format(segment_no=problem["segment_no"], detail=problem["detail"]))
    for lost in report["lost"]:
        console.print(said["not_archived"].format(type=lost["type"], event_id=lost["event_id"], subject=lost["subject"],
                                                  schema=lost["schema"], at=at_text(lost["published_at"])))  # fmt: skip
    models = report["models"]
    if models["mismatches"]:
        console.print(table(lang, "", ["model", "key", "difference", "event"],
                            [[m["model"], m["key"], m["detail"], m["event_id"]] for m in models["mismatches"][:50]]))  # fmt: skip
    if models["not_running"]:
        console.print(said["not_running"].format(names=", ".join(models["not_running"])))
    first = report["first_break"]
    if first:
        console.print(said["first_break"].format(seq=first["seq"], event_id=first["event_id"], type=first.get("type", ""),
                                                 subject=first.get("subject", ""), at=at_text(first.get("occurred_at")),
                                                 what=first["what"]))  # fmt: skip
    console.print(said["history_holds"] if report["ok"] else said["history_broken"])


def _verify_rows(report: dict[str, Any], said: dict[str, str]) -> list[list[Any]]:
    """One row per check: the chain, the segments, completeness, the replayed models."""
    chain, segments, models = report["chain"], report["segments"], report["models"]
    chained = (said["chain_holds"].format(events=report["events"]) if chain is None
               else said["chain_broken"].format(events=report["events"], seq=chain["seq"], detail=chain["detail"]))  # fmt: skip
    if not segments["checked"] and segments["count"]:
        segmented = said["segments_unchecked"].format(count=segments["count"])
    elif not segments["problems"]:
        segmented = said["segments_hold"].format(count=segments["count"])
    else:
        segmented = said["segments_problems"].format(count=segments["count"], problems=len(segments["problems"]))
    complete = said["complete"] if not report["lost"] else said["incomplete"].format(lost=len(report["lost"]))
    compared = ", ".join(f"{k} {v}" for k, v in models["compared"].items())
    replayed = said["models_equal"] if not models["mismatches"] else said["models_differ"].format(n=len(models["mismatches"]))
    return [[said["chain"], chained], [said["segments"], segmented], [said["completeness"], complete],
            [said["models"], f"{replayed} ({compared})"]]  # fmt: skip


def replay(
    until: Annotated[datetime | None, typer.Option("--until", help="ISO 8601 with a time zone, e.g. 2026-03-01T12:00:00+08:00")] = None,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """The state at any moment, folded from the archive: tasks, leases in force, quotas, spend."""
    if until is not None and until.tzinfo is None:
        raise typer.BadParameter(LABELS[lang.value]["until_zone"], param_hint="--until")
    with cli_api(lang) as api:
        state = api.get("/v1/audit/replay", until=until.isoformat() if until else None)
    if as_json:
        emit_json(state)
        return
    console.print(LABELS[lang.value]["as_of"].format(at=at_text(state["as_of"]), events=state["events"]))
    console.print(table(lang, "tasks", ["state", "tasks"], [[k, v] for k, v in sorted(state["task_states"].items())]))
    console.print(table(lang, "leases in force", ["lease", "task", "node", "card", "gpus", "granted"],
                        [[x["lease_id"], x["task_id"], x["node_id"], x["card_type"], ",".join(map(str, x["gpu_indices"])),
                          at_text(x["granted_at"])] for x in state["active_leases"]]))  # fmt: skip
    console.print(table(lang, "quotas", ["account", "key", "gpu_hours", "used", "left"],
                        [[q["account_id"], q["project"], q["gpu_hours"], q["used_gpu_hours"], q["remaining_gpu_hours"]]
                         for q in state["quotas"]]))  # fmt: skip
    for name in ("spend_by_project", "spend_by_card"):
        console.print(table(lang, name.replace("_", " "), ["key", "gpu_hours", "cost"],
                            [[r["key"], r["gpu_hours"], r["cost"]] for r in state[name]]))  # fmt: skip


def why(task: TaskArgument, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """The whole story of a task: each step with time, actor and reason, and its runs."""
    with cli_api(lang) as api:
        task_id = task_id_or_ref(api, task)
        story = api.get(f"/v1/audit/why/{task_id}", lang=lang.value)
    if as_json:
        emit_json(story)
        return
    said = LABELS[lang.value]
    output = story["output_units"] if story["output_units"] is not None else "–"
    console.print(said["why_headline"].format(name=story["name"] or task_id, task=task_id, project=story["project"],
                                              state=reason_label(story["state"], lang), reason=reason_label(story["reason"], lang),
                                              gpu_hours=story["gpu_hours"], cost=story["cost"], output=output))  # fmt: skip
    console.print(table(lang, "runs", ["run", "node", "card", "gpus", "granted", "ended", "why_ended", "gpu_hours", "cost", "output"],
                        [[r["run"], ",".join(r["node_ids"]), r["card_type"], r["gpus"], at_text(r["granted_at"]),
                          at_text(r["ended_at"]), (r["end_reason_label"] or "") + (f" ({r['stopped_by']})" if r["stopped_by"] else ""),
                          r["gpu_hours"], r["cost"], r["output_units"]] for r in story["runs"]]))  # fmt: skip
    named = lang is CliLang.ZH  # English names the event in its sentence; Chinese adds a column with its name
    console.print(table(lang, "steps", ["time", "actor", "run", *(["event"] if named else []), "reason", "what"],
                        [[at_text(s["at"]), s["actor"], s["run"], *([s["event_label"]] if named else []), s["reason_label"],
                          _step_text(s, lang)] for s in story["steps"]]))  # fmt: skip


def _step_text(step: dict[str, Any], lang: CliLang) -> str:
    """A step's sentence, and the English one beside it as 原文 where the Chinese leaves words out."""
    original = f"\n{LABELS[lang.value]['original']}{step['original']}" if step.get("original") else ""
    return step["sentence"] + original


def log(
    actor: Annotated[str | None, typer.Option("--actor", help="user:alice, or alice")] = None,
    event_type: Annotated[str | None, typer.Option("--type", help="an event type, or a prefix like quota.")] = None,
    since: Annotated[datetime | None, typer.Option("--since", help="ISO 8601 with a time zone")] = None,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Who changed what: configuration, templates, quotas, approvals, cancellations, tokens, agents, rounds."""
    with cli_api(lang) as api:
        rows = api.get("/v1/audit/log", actor=actor, type=event_type, since=since.isoformat() if since else None)
    if as_json:
        emit_json(rows)
        return
    console.print(table(lang, "audit log", ["time", "actor", "event", "subject", "what", "reason"],
                        [[at_text(r["at"]), r["actor"], r["type"], r["subject"], r["what"], r["reason"]] for r in rows]))  # fmt: skip

