"""`cardflow alerts [--since WHEN] [--json] [--lang zh]`: the alert digest — every alert since then, with where it went.

An API client of `GET /v1/alerts/digest` (any token). `--since` takes `24h`, `7d`, `90m` or an ISO
date-time (UTC if it has no zone); the default is the last 24 hours. The table says, per alert, its
kind, when, what it is about, the sentence, and each webhook delivery (delivered, pending with
its attempts, or dead-lettered with the last error). A line under it says when the daily digest
is pushed (the policy's `alerts.digest`) and the last one sent, with its deliveries. Headers and
that line in Chinese with `--lang zh` (or CARDFLOW_LANG=zh); sentences stay as the ledger wrote them.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()
_RELATIVE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


NOT_A_TIME: dict[CliLang, str] = {
    CliLang.EN: "{text!r}: expected 24h, 7d, 90m or an ISO date-time such as 2026-12-01T08:00",
    CliLang.ZH: "{text!r}：应为 24h、7d、90m 或 ISO 日期时间，如 2026-12-01T08:00",
}


def since_moment(text: str, now: datetime, lang: CliLang = CliLang.EN) -> datetime:
    """`24h` / `7d` / `90m` before `now`, or an ISO date-time (UTC if naive)."""
    match = _RELATIVE.match(text.strip())
    if match:
        return now - timedelta(**{_UNITS[match["unit"]]: float(match["n"])})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(NOT_A_TIME[lang].format(text=text)) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def register(app: typer.Typer) -> None:
    app.command("alerts")(alerts)


def alerts(
    since: Annotated[str, typer.Option("--since", help="24h, 7d, 90m or an ISO date-time")] = "24h",
    as_json: Annotated[bool, typer.Option("--json", help="print the digest as JSON")] = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """The alert digest: every alert since then (quota, approvals, deadlines, idle reclaim, failures)."""
    start = since_moment(since, datetime.now(UTC), lang)
    with cli_api(lang) as api:
        digest = api.get("/v1/alerts/digest", since=start.isoformat(), lang=lang.value)
    if as_json:
        print(json.dumps(digest, indent=2, ensure_ascii=False))
        return
    console.print(digest_table(digest, lang))
    if "daily" in digest:
        console.print(daily_line(digest["daily"], lang), markup=False, highlight=False)


ZH_WORDS = {"when": "时间", "kind": "类型", "about": "对象", "what": "内容", "webhooks": "Webhook 投递", "none": "无"}
"""Chinese for the digest table's headers (`--lang zh`)."""


def _say(text: str, lang: CliLang) -> str:
    return ZH_WORDS.get(text, text) if lang is CliLang.ZH else text


def digest_table(digest: dict[str, Any], lang: CliLang = CliLang.EN) -> Table:
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(digest["counts"].items())) or _say("none", lang)
    title = (f"自 {digest['since'][:16]} 以来的告警：{digest['total']} 条（{counts}）" if lang is CliLang.ZH
             else f"alerts since {digest['since'][:16]}: {digest['total']} ({counts})")
    table = Table(title=title)
    for header in ("when", "kind", "about", "what", "webhooks"):
        table.add_column(_say(header, lang), overflow="fold")
    for alert in digest["alerts"]:
        about = alert["task_id"] or alert["account_id"] or ""
        if alert["project"]:
            about += f" ({alert['project']})"
        table.add_row(alert["occurred_at"][:19].replace("T", " "), alert["kind"], about, alert["sentence"],
                      "\n".join(_delivery(d) for d in alert["deliveries"]) or "—")
    return table


def _delivery(delivery: dict[str, Any]) -> str:
    status = delivery["status"]
    if status == "delivered":
        return f"✓ {delivery['url']}"
    tried = f"{delivery['attempts']} tries"
    return f"{'✗ dead' if status == 'dead' else '… pending'} {delivery['url']} ({tried}; {delivery['last_error'] or ''})"


def daily_line(daily: dict[str, Any], lang: CliLang = CliLang.EN) -> str:
    """When the daily digest is pushed, and the last one sent with its webhook deliveries."""
    zh = lang is CliLang.ZH
    if not daily["enabled"]:
        return "每日摘要：已关闭（alerts.digest.enabled=false）" if zh else "daily digest: off (alerts.digest.enabled=false)"
    when = f"每天 {daily['at']}（{daily['timezone']}）推送到 webhook 和日志" if zh else \
        f"pushed at {daily['at']} {daily['timezone']} to the webhook and log sinks"
    last = daily.get("last")
    if last is None:
        return f"每日摘要：{when}；尚未发送" if zh else f"daily digest: {when}; none sent yet"
    sent = last["sent_at"][:16].replace("T", " ")
    to = "; ".join(_delivery(d) for d in last["deliveries"]) or ("无 webhook" if zh else "no webhook")
    if zh:
        return f"每日摘要：{when}；最近一次：{last['day']}（{sent} UTC 发送，{last['alerts']} 条告警）→ {to}"
    return f"daily digest: {when}; last: {last['day']} (sent {sent} UTC, {last['alerts']} alerts) → {to}"
