"""`cardflow matches TASK`, `cardflow review`, `cardflow review clear-flag TASK --reason`: the match review.

Thin clients of `/v1/matches/*` and `/v1/review*`: a task's ranked card types and its verdict in
hindsight; verdicts per card type, project or profile; clearing a flagged success. Rich tables
(English or `--lang zh`) or `--json`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption
from services.cli.report_tables import LABELS, JsonOption, ReasonOption, console, emit_json, reason_label, table
from services.cli.task_refs import TaskArgument, task_id_or_ref
from services.ledger.review_reasons import Verdict, review_reason_text, verdict_label


def register(app: typer.Typer) -> None:
    """Attach `matches` and `review` (with `review clear-flag`)."""
    app.command("matches")(matches)
    reviews = typer.Typer(help="The match review; `review clear-flag TASK --reason` clears a flagged success.",
                          invoke_without_command=True)  # fmt: skip
    app.add_typer(reviews, name="review")
    reviews.callback()(review)
    reviews.command("clear-flag")(clear_flag)


def matches(task: TaskArgument, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """A task's card match: every ranked card type, and once it finished, the verdict in hindsight."""
    with cli_api(lang) as api:
        task_id = task_id_or_ref(api, task)
        found = api.get(f"/v1/matches/{task_id}", lang=lang.value)
    if as_json:
        emit_json(found)
        return
    reviewed = found["review"]
    hindsight = {a["card_type"]: a for a in (reviewed or {}).get("alternatives", [])}
    said = LABELS[lang.value]
    rows = [[o["card_type"] + (said["chosen_mark"] if o["card_type"] == found["chosen"] else "")
             + (said["ran_on_mark"] if reviewed and o["card_type"] == reviewed["ran_on"] else ""),
             o["est_runtime_s"] / 3600, o["est_cost"],
             hindsight[o["card_type"]]["predicted_runtime_s"] / 3600 if o["card_type"] in hindsight else None,
             hindsight[o["card_type"]]["predicted_cost"] if o["card_type"] in hindsight else None]
            for o in found["ranking"]]  # fmt: skip
    console.print(f"[bold]{found['name'] or task_id}[/bold]: {found['why']}"
                  + (f" ({said['catalog']} {found['catalog_version']})" if found["catalog_version"] else ""))  # fmt: skip
    console.print(table(lang, said["ranking"], ["card", "est_runtime", "est_cost", "hindsight_runtime", "hindsight_cost"], rows))
    if reviewed:
        per_unit = reviewed["cost_per_output_unit"]
        console.print(f"[bold]{verdict_label(reviewed['verdict'], lang)}[/bold]{said['colon']}{review_reason_text(reviewed, lang)}"
                      f"{said['then']}{said['per_unit_said']} {per_unit if per_unit is not None else '–'}")  # fmt: skip
        console.print(run_line(reviewed, lang))
    else:
        console.print(said["no_verdict"])


def clear_flag(task: TaskArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Clear a flagged success after checking its output (reviewer of its project, not its submitter):
    the ledger then counts the held-back output, once; recorded with you as actor and the reason."""
    with cli_api(lang) as api:
        task_id = task_id_or_ref(api, task)
        answer = api.post(f"/v1/review/{task_id}/clear-flag", {"reason": reason})
    if as_json:
        emit_json(answer)
        return
    units = sum(run["output_units"] or 0 for run in answer["runs"])
    console.print(LABELS[lang.value]["flag_cleared"].format(task=task_id, actor=answer["cleared_by"], units=f"{units:g}"))


def print_flagged(flagged: list[dict[str, Any]], lang: CliLang) -> None:
    """The flagged successes (their output held back from every total), when there are any."""
    if flagged:
        title = LABELS[lang.value]["flagged successes (output not counted)"]
        console.print(table(lang, title, ["task", "flags", "output", "claimed", "what"],
                            [[f"{f['task_id']} {f['name'] or ''}".strip(), ", ".join(str(reason_label(x, lang)) for x in f["flags"]),
                              f["output_units"], f["claimed_output_units"], f["detail"]] for f in flagged]))  # fmt: skip


def clock_text(simulated: str | None, lang: CliLang) -> str:
    """"simulated ×60" (模拟 ×60) for figures from a scaled agent; "real" (真实) otherwise."""
    if simulated is None:
        return "真实" if lang is CliLang.ZH else "real"
    return simulated.replace("simulated", "模拟") if lang is CliLang.ZH else simulated


def run_line(reviewed: dict[str, Any], lang: CliLang) -> str:
    """Runtime (in the agent's time, with its clock) and the time-weighted mean GPU utilisation."""
    util, coverage = reviewed["util_pct"], reviewed["util_coverage"]
    clock = clock_text(reviewed["simulated"], lang)
    if lang is CliLang.ZH:
        busy = (f"GPU 平均利用率 {util:.0f}%（按时间加权，覆盖运行的 {coverage:.0%}）" if util is not None
                else "GPU 利用率：未上报")  # fmt: skip
        return f"运行 {reviewed['runtime_s'] / 3600:.2f} h（{clock}，墙钟 {reviewed['wall_runtime_s']:.0f} s）· {busy}"
    busy = (f"GPUs {util:.0f}% busy (time-weighted mean over {coverage:.0%} of the run)" if util is not None
            else "GPU utilisation: not reported")  # fmt: skip
    return f"ran {reviewed['runtime_s'] / 3600:.2f} h ({clock}, wall clock {reviewed['wall_runtime_s']:.0f} s) · {busy}"


class ReviewBy(StrEnum):
    card = "card"
    project = "project"
    profile = "profile"


def review(
    ctx: typer.Context,
    round_id: Annotated[str | None, typer.Option("--round", help="only tasks that finished in this round")] = None,
    by: Annotated[ReviewBy, typer.Option("--by", help="group by card type, project or profile")] = ReviewBy.card,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Which matches were worth it: verdicts per group, cheapest output first, and the actual/estimated
    runtime per card type and profile (to correct the catalog's speed factors)."""
    if ctx.invoked_subcommand is not None:
        return
    with cli_api(lang) as api:
        result = api.get("/v1/review", round=round_id, by=by.value)
    if as_json:
        emit_json(result)
        return
    from services.console.labels import profile_label  # lazily: the CLI starts fast

    said = LABELS[lang.value]
    console.print(table(lang, said["review_by"].format(by=said.get(f"by_{by.value}", by.value)),
                        ["key", "tasks", *(verdict_label(v, lang) for v in Verdict),
                         "gpu_hours", "cost", "output", "cost_per_unit", "ratio", "util"],
                        [[profile_label(g["key"], lang.value) if by is ReviewBy.profile else g["key"], g["tasks"],
                          *(g[v.value] for v in Verdict), g["gpu_hours"],
                          g["cost"], g["output_units"], g["cost_per_output_unit"], g["mean_runtime_ratio"],
                          g["mean_util_pct"]] for g in result["groups"]]))  # fmt: skip
    for group in (g for g in result["groups"] if g["simulated"]):
        console.print(LABELS[lang.value]["simulated_group"].format(key=group["key"], clock=clock_text(group["simulated"], lang)))
    console.print(table(lang, said["reviewed"], ["task", "ran_on", "verdict", "runtime", "clock", "ratio", "util"],
                        [[t["task_id"], t["ran_on"], verdict_label(t["verdict"], lang), t["runtime_s"] / 3600,
                          clock_text(t["simulated"], lang), t["ratio"], t["util_pct"]] for t in result["tasks"]]))  # fmt: skip
    console.print(LABELS[lang.value]["util_note"])
    console.print(table(lang, said["speed"], ["card", "profile", "tasks", "ratio"],
                        [[c["card_type"], profile_label(c["profile"], lang.value), c["tasks"], c["mean_ratio"]]
                         for c in result["speed_corrections"]]))  # fmt: skip
    print_flagged(result.get("flagged", []), lang)
    for task in result["tasks"]:
        if task["verdict"] != Verdict.WORTH_IT:
            console.print(f"{task['task_id']} {task['name']}: [bold]{verdict_label(task['verdict'], lang)}[/bold]"
                          f" — {review_reason_text(task, lang)}")  # fmt: skip

