"""Pages for planners and auditors: rounds with their retrospective notes, the match review, and
the change log.

Like every page (`services.console.pages.routes`), each reads the console's own `/v1` endpoints
with the reader's token, so the API's role checks apply: reading rounds and the review takes any
token, closing a round or amending its note the operator role, the change log the auditor role
(a page shows the API's refusal, never an empty table).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from services.console.pages.charts import stacked_bars
from services.console.pages.routes import call_api, choose_lang, forward_form, render
from services.console.pages.templating import Unavailable, labels_for

router = APIRouter(include_in_schema=False)
REVIEW_GROUPINGS = ("card", "project", "profile")


@router.get("/rounds")
async def rounds_page(request: Request, refused: Unavailable | None = None) -> HTMLResponse:
    """Closed rounds (newest first) with their notes, a trend plot, and the close-a-round form."""
    rounds = await call_api(request, "GET", "/v1/rounds")
    plot = None if isinstance(rounds, Unavailable) else _trend_plot(rounds, choose_lang(request))
    newest_first = rounds if isinstance(rounds, Unavailable) else list(reversed(rounds))
    return await render(request, "rounds.html", title="nav_rounds", page="rounds", rounds=newest_first, plot=plot,
                        refused=refused, notice=request.query_params.get("notice"))  # fmt: skip


@router.post("/rounds/close")
async def close_round_from_page(request: Request, note: Annotated[str, Form()], reason: Annotated[str, Form()]) -> Response:
    return await forward_form(request, "/v1/rounds/close", {"note": note, "reason": reason},
                              refused_page=lambda refusal: rounds_page(request, refused=refusal),
                              done=lambda closed: f"/rounds/{closed['round_id']}?notice=round_closed")  # fmt: skip


@router.get("/rounds/{round_id}")
async def round_page(request: Request, round_id: str, refused: Unavailable | None = None) -> HTMLResponse:
    """One round's report: totals, spend against output per project, card type and scenario,
    estimates against actuals, idle GPU-hours, preemption losses, the review, and the note's history."""
    found = await call_api(request, "GET", f"/v1/rounds/{round_id}")
    plots = {} if isinstance(found, Unavailable) else _round_plots(found["report"], choose_lang(request))
    return await render(request, "round.html", title="round_title", page="rounds", round=found, round_id=round_id,
                        plots=plots, refused=refused, notice=request.query_params.get("notice"))  # fmt: skip


@router.post("/rounds/{round_id}/note")
async def amend_note_from_page(
    request: Request, round_id: str, note: Annotated[str, Form()], reason: Annotated[str, Form()]
) -> Response:
    return await forward_form(request, f"/v1/rounds/{round_id}/note", {"note": note, "reason": reason},
                              refused_page=lambda refusal: round_page(request, round_id, refused=refusal),
                              done=lambda _: f"/rounds/{round_id}?notice=note_amended")  # fmt: skip


@router.get("/review")
async def review_page(request: Request, by: str = "card", round: str | None = None) -> HTMLResponse:  # noqa: A002
    """Which matches were worth it: verdicts grouped by card type, project or profile, the runtime
    ratios that say how to correct the catalog's speed factors, every reviewed task, and the flagged
    successes (with a "Clear flag" form for readers whose role may clear one)."""
    return await _review(request, by, round)


@router.post("/review/{task_id}/clear-flag")
async def clear_flag_from_page(request: Request, task_id: str, reason: Annotated[str, Form()] = "",
                               by: str = "card", round: str | None = None) -> Response:  # noqa: A002  # fmt: skip
    """Clear a flagged success (`POST /v1/review/{id}/clear-flag` with the reader's token); the API's refusal is
    shown; either way the reader stays on the grouping and round they were looking at."""
    return await forward_form(request, f"/v1/review/{task_id}/clear-flag", {"reason": reason},
                              refused_page=lambda refusal: _review(request, by, round, refused=refusal),
                              done=lambda _: f"/review?{urlencode(_review_query(by, round) | {'notice': 'flag_cleared'})}")  # fmt: skip


def _review_query(by: str, round: str | None) -> dict[str, str]:  # noqa: A002
    """The review's grouping (an unknown one is "card") and round, as `/v1/review` and `/review` take them."""
    return {"by": by if by in REVIEW_GROUPINGS else "card"} | ({"round": round} if round else {})


async def _review(request: Request, by: str, round: str | None, refused: Unavailable | None = None) -> HTMLResponse:  # noqa: A002
    params = _review_query(by, round)
    review = await call_api(request, "GET", "/v1/review", params=params)
    rounds = await call_api(request, "GET", "/v1/rounds")
    return await render(request, "review.html", title="review_title", page="rounds", review=review, by=params["by"],
                        groupings=REVIEW_GROUPINGS, round=round, refused=refused, notice=request.query_params.get("notice"),
                        rounds=[] if isinstance(rounds, Unavailable) else [r["round_id"] for r in rounds])  # fmt: skip


@router.get("/audit")
async def audit_log_page(
    request: Request, actor: str | None = None, type: str | None = None, since: str | None = None  # noqa: A002
) -> HTMLResponse:
    """Who changed what (config, templates, quotas, approvals, cancels, tokens, rounds), newest first."""
    params = {key: value for key, value in (("actor", actor), ("type", type), ("since", since)) if value}
    log = await call_api(request, "GET", "/v1/audit/log", params=params | {"limit": 500})
    return await render(request, "audit_log.html", title="audit_title", page="audit", log=log,
                        actor=actor or "", type=type or "", since=since or "")  # fmt: skip


def _trend_plot(rounds: list[dict[str, Any]], lang: str) -> str | None:
    """Cost per round (oldest first), one bar each."""
    if not rounds:
        return None
    labels = [r["round_id"] for r in rounds]
    L = labels_for(lang)["L"]  # noqa: N806
    return stacked_bars(labels, {L["cost"]: [r["cost"] or 0.0 for r in rounds]}, y_label=L["cost_axis"])


def _round_plots(report: dict[str, Any], lang: str) -> dict[str, str | None]:
    """Spend by project, and cost per output unit by card type, as bar charts."""
    L = labels_for(lang)["L"]  # noqa: N806
    return {
        "spend_by_project": _bars(report.get("by_project") or [], "cost", L["cost"], L["cost_axis"]),
        "unit_cost_by_card": _bars(report.get("by_card") or [], "cost_per_output_unit", L["cost_per_unit"],
                                   L["cost_per_unit"]),  # fmt: skip
    }


def _bars(rows: list[dict[str, Any]], measure: str, name: str, y_label: str) -> str | None:
    shown = [row for row in rows if row.get(measure) is not None]
    if not shown:
        return None
    return stacked_bars([str(row["key"]) for row in shown], {name: [float(row[measure]) for row in shown]}, y_label=y_label)
