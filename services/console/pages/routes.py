"""Page handlers: each page reads the console's own `/v1` endpoints in-process and renders a template.

Reading the API (not the tables) keeps one source for what the console shows and who may see it:
the page forwards the reader's token (kept in an HttpOnly cookie by /login) as `Authorization`, so
the API's role checks apply to pages unchanged. An endpoint that answers an error is shown as
"not available yet" with its detail, never as an empty table.

Language: `?lang=zh|en` (remembered in a cookie), else the cookie, else the browser's
Accept-Language, else English. Every page is linkable: its state is in its path and query.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any
from urllib.parse import urlencode

import httpx
from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console.auth import SESSION_COOKIE, principal_from_token
from services.console.labels import GPU_STATUS_LABELS, LANGUAGES, Language
from services.console.pages.charts import line_chart, stacked_bars
from services.console.pages.templating import Unavailable, environment, labels_for, parse_time

router = APIRouter(include_in_schema=False)
LANG_COOKIE = "cardflow_lang"
TOKEN_COOKIE = SESSION_COOKIE
"""The session cookie `services.console.auth` reads (HttpOnly, SameSite=Strict)."""
NAV = ("board", "queue", "approvals", "fleet", "quotas", "ledger", "rounds", "config", "audit", "tasks")
LEDGER_DAYS = 7


def choose_lang(request: Request) -> Language:
    asked = request.query_params.get("lang") or request.cookies.get(LANG_COOKIE)
    if asked in LANGUAGES:
        return asked  # type: ignore[return-value]
    return "zh" if request.headers.get("accept-language", "").lower().startswith("zh") else "en"


def _auth_headers(request: Request) -> dict[str, str]:
    token = request.cookies.get(TOKEN_COOKIE)
    return {"authorization": f"Bearer {token}"} if token else {}


class SignInRequired(Exception):
    """The API answered 401 for a page's data: the reader has to sign in (`sign_in_redirect`)."""


async def sign_in_redirect(request: Request, exc: Exception) -> Response:
    """Send the reader to /login, back to this page afterwards (registered on the app for `SignInRequired`)."""
    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?{urlencode({'back': back})}", status_code=303)


async def call_api(request: Request, method: str, path: str, *, sign_in: bool = True, **kwargs: Any) -> Any:
    """The JSON of `method path` on this app (in-process), or `Unavailable` with the API's detail.

    A 401 raises `SignInRequired` (the page redirects to /login) unless `sign_in` is False."""
    transport = httpx.ASGITransport(app=request.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console", headers=_auth_headers(request)) as client:
        response = await client.request(method, path, **kwargs)
    if response.status_code == 401 and sign_in:
        raise SignInRequired(path)
    if response.is_success:
        return response.json() if response.content else {}
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if response.status_code == 404 and detail == "Not Found":  # no such route: its owner has not landed it
        detail = f"this console has no {method} {path} yet"
    return Unavailable(response.status_code, detail if isinstance(detail, str) else str(detail))


RefusalPage = Callable[[Unavailable], Awaitable[HTMLResponse]]
"""Renders a form's page again with the API's refusal shown on it."""


async def forward_form(request: Request, path: str, body: dict[str, Any], *, refused_page: RefusalPage,
                       done: Callable[[Any], str]) -> Response:  # fmt: skip
    """Every page form's one path: POST `body` to the console's own API with the reader's token, so
    the API's role checks and records apply; a refusal shows on the page again with the API's status,
    a success redirects (303) to `done(answer)`."""
    answer = await call_api(request, "POST", path, json=body)
    if isinstance(answer, Unavailable):
        page = await refused_page(answer)
        page.status_code = answer.status
        return page
    return RedirectResponse(done(answer), status_code=303)


async def render(request: Request, template: str, *, title: str, page: str, **context: Any) -> HTMLResponse:
    """The page in the reader's language, with the nav, the language switch and the quota banner."""
    lang = choose_lang(request)
    alerts = await call_api(request, "GET", "/v1/alerts", sign_in=False, params={"lang": lang})
    whoami = await call_api(request, "GET", "/v1/whoami", sign_in=False) if request.cookies.get(TOKEN_COOKIE) else None
    me = None if isinstance(whoami, Unavailable) else whoami  # the header names a reader only for a valid session
    other = "en" if lang == "zh" else "zh"
    query = {**request.query_params, "lang": other}
    html = environment.get_template(template).render(
        title=title, page=page, nav=NAV, now=datetime.now(UTC), alerts=[] if isinstance(alerts, Unavailable) else alerts,
        switch_href=f"{request.url.path}?{urlencode(query)}", path=request.url.path,
        me=me,
        **labels_for(lang), **context,
    )  # fmt: skip
    response = HTMLResponse(html)
    if request.query_params.get("lang") in LANGUAGES:
        response.set_cookie(LANG_COOKIE, lang, max_age=365 * 86400, samesite="lax")
    if isinstance(whoami, Unavailable) and whoami.status == 401:
        response.delete_cookie(TOKEN_COOKIE)  # an expired or revoked token: forget it; the header offers "sign in"
    return response


@router.get("/")
async def home(request: Request) -> Response:
    """The board; the old single page's `/?task=ID` links go to the task's page."""
    task = request.query_params.get("task")
    lang = request.query_params.get("lang")
    target = f"/tasks/{task}" if task else "/board"
    return RedirectResponse(target + (f"?lang={lang}" if lang in LANGUAGES else ""), status_code=307)


@router.get("/board")
async def board_page(request: Request) -> HTMLResponse:
    lang = choose_lang(request)
    board = await call_api(request, "GET", "/v1/board/groups", params={"lang": lang})
    return await render(request, "board.html", title="nav_board", page="board", board=board)


@router.get("/board/history")
async def board_history_page(request: Request, days: int = 7) -> HTMLResponse:
    history = await call_api(request, "GET", "/v1/board/history", params={"days": days})
    return await render(request, "board_history.html", title="history_title", page="board", history=history, days=days)


@router.get("/board/snapshots")
async def board_snapshots_page(request: Request) -> HTMLResponse:
    snapshots = await call_api(request, "GET", "/v1/board/snapshots")
    return await render(request, "board_snapshots.html", title="snapshots", page="board", snapshots=snapshots)


@router.get("/queue")
async def queue_page(request: Request) -> HTMLResponse:
    lang = choose_lang(request)
    queue = await call_api(request, "GET", "/v1/queue", params={"lang": lang})
    series = await call_api(request, "GET", "/v1/series/queue")
    plot = _line_plot(series, y_label=labels_for(lang)["L"]["tasks_axis"], names=GPU_STATUS_LABELS[lang])  # class names
    return await render(request, "queue.html", title="nav_queue", page="queue", queue=queue, plot=plot)


@router.get("/fleet")
async def fleet_page(request: Request) -> HTMLResponse:
    return await _fleet(request)


async def _fleet(request: Request, refused: Unavailable | None = None) -> HTMLResponse:
    lang = choose_lang(request)
    grid = await call_api(request, "GET", "/v1/fleet/grid")
    series = await call_api(request, "GET", "/v1/series/utilisation")
    plot = _line_plot(series, y_label=labels_for(lang)["L"]["share"], percent=True)
    agents = await call_api(request, "GET", "/v1/agents")  # admins only: others get no section, not an error
    return await render(request, "fleet.html", title="nav_fleet", page="fleet", grid=grid, plot=plot, refused=refused,
                        notice=request.query_params.get("notice"), agents=agents)  # fmt: skip


@router.get("/quotas")
async def quotas_page(request: Request) -> HTMLResponse:
    lang = choose_lang(request)
    quotas = await call_api(request, "GET", "/v1/quotas")
    burn = await call_api(request, "GET", "/v1/series/quota-burn")
    plot = _line_plot(burn, y_label=labels_for(lang)["L"]["left"], percent=True)
    return await render(request, "quotas.html", title="nav_quotas", page="quotas", quotas=quotas, plot=plot)


@router.get("/ledger")
async def ledger_page(request: Request, days: int = LEDGER_DAYS) -> HTMLResponse:
    lang = choose_lang(request)
    by_project = await call_api(request, "GET", "/v1/ledger", params={"by": "project"})
    by_card = await call_api(request, "GET", "/v1/ledger", params={"by": "card"})
    period = await call_api(request, "GET", "/v1/ledger/period", params={"days": days})
    spend = await call_api(request, "GET", "/v1/series/spend", params={"days": max(days, 14)})
    plot = None
    if not isinstance(spend, Unavailable) and spend["days"]:
        plot = stacked_bars(spend["days"], spend["series"], y_label=labels_for(lang)["L"]["cost_axis"])
    return await render(request, "ledger.html", title="nav_ledger", page="ledger", by_project=by_project,
                        by_card=by_card, period=period, plot=plot, days=days)  # fmt: skip


@router.get("/approvals")
async def approvals_page(request: Request) -> HTMLResponse:
    """Tasks held until a reviewer approves them (the board's `approval` group), with approve / deny."""
    return await _approvals(request)


@router.post("/approvals/{task_id}/{decision}")
async def decide_from_page(request: Request, task_id: str, decision: str, reason: Annotated[str, Form()] = "") -> Response:
    """Approve or deny (`POST /v1/tasks/{id}/approve|deny` with the reader's token); the API's refusal is shown."""
    if decision not in DECISIONS:
        return HTMLResponse(f"unknown decision {decision!r}: approve or deny", status_code=404)
    return await forward_form(request, f"/v1/tasks/{task_id}/{decision}", {"reason": reason},
                              refused_page=lambda refusal: _approvals(request, refused=refusal),
                              done=lambda _: f"/approvals?done={decision}")  # fmt: skip


DECISIONS = ("approve", "deny")


async def _approvals(request: Request, refused: Unavailable | None = None) -> HTMLResponse:
    lang = choose_lang(request)
    board = await call_api(request, "GET", "/v1/board/groups", params={"lang": lang})
    waiting = board if isinstance(board, Unavailable) else next(g["tasks"] for g in board["groups"] if g["kind"] == "approval")
    decided = await call_api(request, "GET", "/v1/approvals/decisions", params={"days": DECISIONS_SHOWN_DAYS})
    return await render(request, "approvals.html", title="nav_approvals", page="approvals", waiting=waiting,
                        decided=decided, decided_days=DECISIONS_SHOWN_DAYS, refused=refused,
                        done=request.query_params.get("done"))  # fmt: skip


DECISIONS_SHOWN_DAYS = 7


EXPORTS_SHOWN = 14
"""The Config page lists the newest exports (two weeks of daily ones); `cardflow export --list` has all."""


@router.get("/config")
async def config_page(request: Request, name: str = "policy", diff_from: int | None = None,
                      diff_to: int | None = None) -> HTMLResponse:  # fmt: skip
    """Each document, the history of one (who, when, why, where in the bucket), a diff between any two
    of its versions, and the task-list exports (`GET /v1/config/documents`, `/v1/config/history`,
    `/v1/config/diff`, `/v1/exports`)."""
    documents = await call_api(request, "GET", "/v1/config/documents")
    history = await call_api(request, "GET", "/v1/config/history", params={"name": name})
    versions = history if isinstance(history, Unavailable) else sorted(history["versions"], key=lambda v: -v["version"])
    diff = None
    if diff_from is not None:
        params = {"name": name, "old": diff_from} | ({"new": diff_to} if diff_to is not None else {})
        diff = await call_api(request, "GET", "/v1/config/diff", params=params)
    exports = await call_api(request, "GET", "/v1/exports", params={"limit": EXPORTS_SHOWN})  # newest first
    return await render(request, "config.html", title="nav_config", page="config", documents=documents, name=name,
                        history=versions, diff=diff, diff_from=diff_from, diff_to=diff_to, exports=exports)  # fmt: skip



@router.get("/tasks")
async def tasks_page(request: Request, state: str | None = None) -> HTMLResponse:
    params = {"limit": 500} | ({"state": state} if state else {})
    tasks = await call_api(request, "GET", "/v1/tasks", params=params)
    return await render(request, "tasks.html", title="nav_tasks", page="tasks", tasks=tasks, state=state)


@router.get("/tasks/{task_id}")
async def task_page(request: Request, task_id: str, notice: str | None = None) -> HTMLResponse:
    return await render(request, "task.html", title="task_title", page="tasks", task_id=task_id, notice=notice,
                        **await _task_context(request, task_id))  # fmt: skip


async def _task_context(request: Request, task_id: str) -> dict[str, Any]:
    """What the task page shows: the story from the views, the match review, and — for auditors —
    the audit trail from the archive (`/v1/audit/why`; others see the API's refusal in its place)."""
    lang = choose_lang(request)
    return {
        "story": await call_api(request, "GET", f"/v1/tasks/{task_id}/story", params={"lang": lang}),
        "match_review": await call_api(request, "GET", f"/v1/matches/{task_id}", sign_in=False),
        "why": await call_api(request, "GET", f"/v1/audit/why/{task_id}", params={"lang": lang}, sign_in=False),
    }


@router.post("/tasks/{task_id}/cancel")
async def cancel_from_page(request: Request, task_id: str, reason: Annotated[str, Form()] = "") -> Response:
    """Forward the cancel to the API with the reader's token; show the API's refusal if any."""
    return await forward_form(request, f"/v1/tasks/{task_id}/cancel", {"reason": reason or None},
                              refused_page=_task_page_with(request, task_id), done=lambda _: f"/tasks/{task_id}?notice=cancel_sent")  # fmt: skip


@router.post("/tasks/{task_id}/clear-flag")
async def clear_flag_from_task_page(request: Request, task_id: str, reason: Annotated[str, Form()] = "") -> Response:
    """Clear the task's flagged success (`POST /v1/review/{id}/clear-flag` with the reader's token); the API's refusal is shown."""
    return await forward_form(request, f"/v1/review/{task_id}/clear-flag", {"reason": reason},
                              refused_page=_task_page_with(request, task_id), done=lambda _: f"/tasks/{task_id}?notice=flag_cleared_task")  # fmt: skip


def _task_page_with(request: Request, task_id: str) -> RefusalPage:
    async def refused_page(refusal: Unavailable) -> HTMLResponse:
        return await render(request, "task.html", title="task_title", page="tasks", task_id=task_id, refused=refusal,
                            **await _task_context(request, task_id))  # fmt: skip

    return refused_page


TASK_VERBS = ("hold", "release", "requeue", "priority")
NODE_VERBS = ("drain", "undrain")


@router.post("/tasks/{task_id}/operator/{verb}")
async def task_verb_from_page(request: Request, task_id: str, verb: str, reason: Annotated[str, Form()] = "",
                              priority: Annotated[int | None, Form()] = None) -> Response:  # fmt: skip
    """An operator's verb on the task (`POST /v1/tasks/{id}/<verb>` with the reader's token); the API's refusal is shown."""
    if verb not in TASK_VERBS:
        return HTMLResponse(f"unknown action {verb!r}: one of {', '.join(TASK_VERBS)}", status_code=404)
    body: dict[str, Any] = {"reason": reason} | ({"priority": priority} if verb == "priority" else {})
    return await forward_form(request, f"/v1/tasks/{task_id}/{verb}", body, refused_page=_task_page_with(request, task_id),
                              done=lambda _: f"/tasks/{task_id}?notice={verb}_sent")  # fmt: skip


@router.post("/fleet/{node_id}/{verb}")
async def node_verb_from_page(request: Request, node_id: str, verb: str, reason: Annotated[str, Form()] = "") -> Response:
    """Drain or undrain a node (`POST /v1/nodes/{id}/drain|undrain` with the reader's token); the API's refusal is shown."""
    if verb not in NODE_VERBS:
        return HTMLResponse(f"unknown action {verb!r}: drain or undrain", status_code=404)
    return await forward_form(request, f"/v1/nodes/{node_id}/{verb}", {"reason": reason},
                              refused_page=lambda refusal: _fleet(request, refused=refusal),
                              done=lambda _: f"/fleet?notice={verb}_sent")  # fmt: skip


@router.get("/login")
async def login_page(request: Request) -> Response:
    """The sign-in form; `?token=` (the link `cardflow up` prints, like Jupyter's) signs in at once
    when the token is valid, and drops it from the address bar."""
    token = request.query_params.get("token")
    if token and await principal_from_token(request.app.state.pool, token.strip()) is not None:
        return _signed_in(request.query_params.get("back") or "/board", token)
    return await render(request, "login.html", title="login", page="login", request_back=request.query_params.get("back"))


@router.post("/login")
async def login(request: Request, token: Annotated[str, Form()], back: Annotated[str, Form()] = "/board") -> Response:
    """Check the token (`/v1/whoami`), then keep it in an HttpOnly, same-site cookie; the API checks it on every call."""
    token = token.strip()
    transport = httpx.ASGITransport(app=request.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        answer = await client.get("/v1/whoami", headers={"authorization": f"Bearer {token}"})
    if not answer.is_success:
        page = await render(request, "login.html", title="login", page="login", request_back=back,
                            refused=Unavailable(answer.status_code, answer.json().get("detail", answer.text)))  # fmt: skip
        page.status_code = answer.status_code
        return page
    return _signed_in(back, token)


def _signed_in(back: str, token: str) -> Response:
    response = RedirectResponse(back if back.startswith("/") and not back.startswith("//") else "/board", status_code=303)
    response.set_cookie(TOKEN_COOKIE, token.strip(), httponly=True, samesite="strict", max_age=12 * 3600)
    return response


@router.post("/logout")
async def logout() -> Response:
    response = RedirectResponse("/board", status_code=303)
    response.delete_cookie(TOKEN_COOKIE)
    return response


def _line_plot(series: Any, *, y_label: str, percent: bool = False, names: Mapping[str, str] | None = None) -> str | None:
    """The series as a line chart; `names` tells a series' key in the page's language (a key it lacks stays as it is)."""
    if isinstance(series, Unavailable) or not series.get("times") or not any(any(v) for v in series["series"].values()):
        return None
    times = [parse_time(t) for t in series["times"]]
    names = names or {}
    values = {names.get(name, name): [math.nan if v is None else v for v in points] for name, points in series["series"].items()}
    return line_chart(times, values, y_label=y_label, percent=percent)
