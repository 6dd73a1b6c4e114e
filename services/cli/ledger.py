"""`cardflow ledger` (usage and cost totals) and `cardflow quota grant | adjust | renew | list | history`.

API clients (`services.cli.client`); every command prints Chinese headers and answers with `--lang zh`
(or CARDFLOW_LANG=zh). `ledger` reads `GET /v1/ledger?by=&since=&until=` (a table with
the catalog's currency and a note that its hours are real hours, `--json` or `--csv`), `quota list` reads
`GET /v1/quotas` and `quota history` `GET /v1/quotas/{account}/history` (any valid token); `quota
grant` is `POST /v1/quotas`, `quota adjust` / `quota renew` are `POST /v1/quotas/{account}/adjust|renew`
— these need role operator (not limited to a project) and record the caller and `--reason` in their
`quota.granted` / `quota.adjusted` event.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()
errors = Console(stderr=True, soft_wrap=True)

DATE_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S"]


def _utc(value: datetime) -> datetime:
    """A date or time from the command line: naive values are UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _number(value: Any, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _print_json(rows: list[dict[str, Any]] | dict[str, Any]) -> None:
    typer.echo(json.dumps(rows, indent=2, default=str, ensure_ascii=False))


LEDGER_COLUMNS = ("gpu_hours", "idle_gpu_hours", "cost", "currency", "output_units", "output_unit", "cost_per_output_unit")
HOURS_NOTE = ("GPU-hours are real (wall-clock) hours the leases held GPUs, priced at the catalog's price per GPU-hour; "
              "a simulated agent at --time-scale X runs an estimated hour in 1/X real hours, so its tasks cost 1/X of their estimate")  # fmt: skip


HOURS_NOTE_ZH = ("GPU 小时为租约占用 GPU 的真实（挂钟）小时，按卡型目录的每 GPU 小时单价计费；"
                 "以 --time-scale X 运行的模拟节点用 1/X 真实小时跑完预估的一小时，因此其任务费用为预估的 1/X")
ZH_HEADERS = {
    "task_id": "任务", "project": "项目", "card_type": "卡型", "GPU-hours (real)": "GPU 小时（真实）",
    "idle GPU-hours": "空闲 GPU 小时", "cost": "费用", "output units": "产出量", "unit": "单位", "cost / unit": "单位产出费用",
    "account": "账户", "card": "卡型", "GPU-hours": "GPU 小时", "used": "已用", "remaining": "剩余", "used %": "已用 %",
    "valid": "有效期", "days left": "剩余天数", "changed by": "最后修改人", "alerts": "告警", "any": "任意",
    "expired": "已过期", "cardflow ledger": "cardflow 账本", "quota accounts": "配额账户",
    "change": "变更", "Δ GPU-hours": "Δ GPU 小时", "valid to": "有效至", "used then": "当时已用", "by": "操作者",
    "when": "时间", "reason": "原因",
}
"""Chinese for the ledger's and quota list's headers and words (`--lang zh`); numbers and ids stay as they are."""


def _say(text: str, lang: CliLang) -> str:
    return ZH_HEADERS.get(text, text) if lang is CliLang.ZH else text


def _significant(value: Any) -> str:
    """Cost per output unit: four significant digits, whatever its size (never a row of 0.000000)."""
    return "—" if value is None else f"{value:.4g}"


def _ledger_table(rows: list[dict[str, Any]], key: str, window: str, lang: CliLang = CliLang.EN) -> Table:
    currency = rows[0]["currency"] if rows and rows[0].get("currency") else ""
    table = Table(title=_say("cardflow ledger", lang) + window, caption=HOURS_NOTE_ZH if lang is CliLang.ZH else HOURS_NOTE,
                  caption_justify="left")  # fmt: skip
    idle = any("idle_gpu_hours" in row for row in rows)  # per task and project, over all time
    cost, per_unit = _say("cost", lang), _say("cost / unit", lang)
    headers = (key, "GPU-hours (real)", *(("idle GPU-hours",) if idle else ()), f"{cost} ({currency})" if currency else cost,
               "output units", "unit", f"{currency} / {_say('unit', lang)}" if currency else per_unit)  # fmt: skip
    for header in headers:
        table.add_column(_say(header, lang), justify="left" if header in {key, "unit"} else "right")
    for row in rows:
        label = row[key] + (f" ({row['name']})" if row.get("name") else "") + (" *" if row.get("running") else "")
        table.add_row(
            label, _number(row["gpu_hours"], 3), *((_number(row.get("idle_gpu_hours"), 3),) if idle else ()),
            _number(row["cost"]), _number(row["output_units"], 0), row["output_unit"] or "",
            _significant(row["cost_per_output_unit"]),
        )  # fmt: skip
    return table


def _ledger_csv(rows: list[dict[str, Any]], key: str) -> str:
    """The rows as CSV (header first; numbers unrounded; times ISO)."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((key, "name", *LEDGER_COLUMNS, "running"))
    for row in rows:
        writer.writerow((row[key], row.get("name") or "", *("" if row.get(c) is None else row[c] for c in LEDGER_COLUMNS),
                         "" if row.get("running") is None else str(row["running"]).lower()))  # fmt: skip
    return out.getvalue()


def _quota_table(rows: list[dict[str, Any]], lang: CliLang = CliLang.EN) -> Table:
    table = Table(title=_say("quota accounts", lang))
    numeric = {"GPU-hours", "used", "remaining", "used %", "days left"}
    for header in ("account", "project", "card", "GPU-hours", "used", "remaining", "used %", "valid", "days left",
                   "changed by", "alerts"):  # fmt: skip
        table.add_column(_say(header, lang), justify="right" if header in numeric else "left")
    for row in rows:
        days = row.get("days_left")
        table.add_row(
            row["account_id"], row["project"], row["card_type"] or _say("any", lang), _number(row["gpu_hours"]),
            _number(row["used_gpu_hours"]), _number(row["remaining_gpu_hours"]), f"{row['used_share']:.1%}",
            f"{row['valid_from'][:10]} → {row['valid_to'][:10]}",
            _say("expired", lang) if days is not None and days <= 0 else _number(days, 1), row.get("changed_by") or "—",
            ", ".join(row["alerts_raised"]),
        )  # fmt: skip
    return table


QUOTA_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "granted": "granted {hours:g} GPU-hours to {project}: account {account}",
        "changed": "{change} quota account {account}: {hours:g} GPU-hours until {until}, {used:.2f} used (by {by})",
        "history": "quota account {account}: every change",
        "grant": "granted", "adjust": "adjusted", "renew": "renewed",
    },
    CliLang.ZH: {
        "granted": "已向 {project} 授予 {hours:g} GPU 小时配额：账户 {account}",
        "changed": "配额账户 {account} 已{change}：共 {hours:g} GPU 小时，有效至 {until}，已用 {used:.2f}（操作者 {by}）",
        "history": "配额账户 {account}：每次变更",
        "grant": "授予", "adjust": "调整", "renew": "续期",
    },
}
"""The quota commands' answers, and each change's name (`grant`, `adjust`, `renew`) as said."""


def _history_table(account: str, rows: list[dict[str, Any]], lang: CliLang = CliLang.EN) -> Table:
    words = QUOTA_WORDS[lang]
    table = Table(title=words["history"].format(account=account))
    for header in ("#", "change", "Δ GPU-hours", "GPU-hours", "valid to", "used then", "by", "when", "reason"):
        table.add_column(_say(header, lang), justify="right" if header in {"#", "Δ GPU-hours", "GPU-hours", "used then"} else "left")
    for row in rows:
        table.add_row(
            str(row["revision"]), words.get(row["change"], row["change"]), _number(row["delta_gpu_hours"]), _number(row["gpu_hours"]),
            row["valid_to"][:16], _number(row["used_gpu_hours"]), row["actor"] or "—", row["changed_at"][:16],
            row["reason"] or "",
        )  # fmt: skip
    return table


def _print_change(changed: dict[str, Any], lang: CliLang) -> None:
    words = QUOTA_WORDS[lang]
    console.print(words["changed"].format(change=words[changed["change"]], account=changed["account_id"],
                                          hours=changed["gpu_hours"], until=changed["valid_to"][:16],
                                          used=changed["used_gpu_hours"], by=changed["changed_by"]))  # fmt: skip


class By(StrEnum):
    """`--by`: what the ledger totals over (mirrors `services.ledger.reports.Grouping`)."""

    TASK = "task"
    PROJECT = "project"
    CARD = "card"


def register(app: typer.Typer) -> None:
    @app.command("ledger")
    def ledger(
        by: Annotated[By, typer.Option("--by", help="total per task, project or card type")] = By.TASK,
        since: Annotated[str | None, typer.Option("--since", help="only usage and output from then on: 7d, today, 2026-11-01, an ISO time")] = None,
        until: Annotated[str | None, typer.Option("--until", help="only usage and output before then (same forms)")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON rows instead of a table")] = False,
        as_csv: Annotated[bool, typer.Option("--csv", help="print CSV (a header, then one line per row)")] = False,
        lang: LangOption = CliLang.EN,
    ) -> None:  # fmt: skip
        """GPU-hours (real hours), cost in the catalog's currency, output units and cost per output unit (* = a lease still running)."""
        from services.cli.times import parse_when

        now = datetime.now(UTC)
        window: dict[str, str | None] = {}
        for option, text in (("--since", since), ("--until", until)):
            try:
                window[option[2:]] = parse_when(text, now, lang).isoformat() if text else None
            except ValueError as error:
                raise typer.BadParameter(str(error), param_hint=option) from None
        with cli_api(lang) as api:
            rows = api.get("/v1/ledger", by=by.value, **window)
        key = {"task": "task_id", "project": "project", "card": "card_type"}[by.value]
        if as_json:
            _print_json(rows)
        elif as_csv:
            typer.echo(_ledger_csv(rows, key), nl=False)
        else:
            shown = "".join(f" {word} {value[:16].replace('T', ' ')}" for word, value in window.items() if value)
            console.print(_ledger_table(rows, key, f" ({shown.strip()} UTC)" if shown else "", lang))

    quota = typer.Typer(help="Quota accounts: grant, adjust and renew GPU-hours of a project (optionally of one card type), list accounts and their use, each account's history.")
    app.add_typer(quota, name="quota")

    @quota.command("grant")
    def grant(
        project: Annotated[str, typer.Argument(help="project id, as in submissions")],
        gpu_hours: Annotated[float, typer.Option("--gpu-hours", help="GPU-hours granted")],
        valid_from: Annotated[datetime, typer.Option("--valid-from", formats=DATE_FORMATS, help="start (UTC if no zone)")],
        valid_to: Annotated[datetime, typer.Option("--valid-to", formats=DATE_FORMATS, help="end (UTC if no zone)")],
        reason: Annotated[str, typer.Option("--reason", help="why; recorded in the quota.granted event")],
        alert_days: Annotated[float, typer.Option("--alert-days", help="warn this many days before the end")] = 15.0,
        card_type: Annotated[str | None, typer.Option("--card-type", help="only this card type")] = None,
        lang: LangOption = CliLang.EN,
    ) -> None:
        """Grant a quota account (operator): writes it and its quota.granted event."""
        body = {"project": project, "gpu_hours": gpu_hours, "valid_from": _utc(valid_from).isoformat(),
                "valid_to": _utc(valid_to).isoformat(), "alert_lead_days": alert_days, "card_type": card_type,
                "reason": reason}  # fmt: skip
        with cli_api(lang) as api:
            granted = api.post("/v1/quotas", body)
        console.print(QUOTA_WORDS[lang]["granted"].format(hours=gpu_hours, project=project, account=granted["account_id"]))

    @quota.command("list")
    def list_quotas(
        as_json: Annotated[bool, typer.Option("--json", help="print JSON rows instead of a table")] = False,
        lang: LangOption = CliLang.EN,
    ) -> None:
        """Every quota account: used and remaining GPU-hours, validity, days left, who changed it last, alerts."""
        with cli_api(lang) as api:
            rows = api.get("/v1/quotas")
        if as_json:
            _print_json(rows)
        else:
            console.print(_quota_table(rows, lang))

    @quota.command("adjust")
    def adjust(
        account: Annotated[str, typer.Argument(help="quota account id (`cardflow quota list`)")],
        reason: Annotated[str, typer.Option("--reason", help="why; recorded in the quota.adjusted event")],
        gpu_hours: Annotated[float, typer.Option("--gpu-hours", help="GPU-hours to add (negative: remove)")] = 0.0,
        valid_to: Annotated[datetime | None, typer.Option("--valid-to", formats=DATE_FORMATS,
                                                          help="a new end (UTC if no zone)")] = None,  # fmt: skip
        as_json: Annotated[bool, typer.Option("--json", help="print the JSON answer")] = False,
        lang: LangOption = CliLang.EN,
    ) -> None:
        """Add or remove GPU-hours of an account, or move its end (operator)."""
        body = {"delta_gpu_hours": gpu_hours, "valid_to": _utc(valid_to).isoformat() if valid_to else None,
                "reason": reason}  # fmt: skip
        with cli_api(lang) as api:
            changed = api.post(f"/v1/quotas/{account}/adjust", body)
        if as_json:
            _print_json(changed)
        else:
            _print_change(changed, lang)

    @quota.command("renew")
    def renew(
        account: Annotated[str, typer.Argument(help="quota account id (`cardflow quota list`)")],
        valid_to: Annotated[datetime, typer.Option("--valid-to", formats=DATE_FORMATS,
                                                   help="the new end, later than the current one (UTC if no zone)")],
        reason: Annotated[str, typer.Option("--reason", help="why; recorded in the quota.adjusted event")],
        gpu_hours: Annotated[float, typer.Option("--gpu-hours", help="GPU-hours added for the new period")] = 0.0,
        as_json: Annotated[bool, typer.Option("--json", help="print the JSON answer")] = False,
        lang: LangOption = CliLang.EN,
    ) -> None:
        """Extend an account's validity, optionally adding GPU-hours (operator); held long tasks may start."""
        body = {"valid_to": _utc(valid_to).isoformat(), "add_gpu_hours": gpu_hours, "reason": reason}
        with cli_api(lang) as api:
            changed = api.post(f"/v1/quotas/{account}/renew", body)
        if as_json:
            _print_json(changed)
        else:
            _print_change(changed, lang)

    @quota.command("history")
    def history(
        account: Annotated[str, typer.Argument(help="quota account id (`cardflow quota list`)")],
        as_json: Annotated[bool, typer.Option("--json", help="print JSON rows instead of a table")] = False,
        lang: LangOption = CliLang.EN,
    ) -> None:
        """Every change of a quota account: grant, adjustments, renewals — the terms after each, who and why."""
        with cli_api(lang) as api:
            rows = api.get(f"/v1/quotas/{account}/history")
        if as_json:
            _print_json(rows)
        else:
            console.print(_history_table(account, rows, lang))
