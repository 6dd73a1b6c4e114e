"""Times as a person types them on the command line: `2h`, `3d`, `today`, `2026-11-30`, ISO 8601.

    parse_when("2d", now)           # two days before now
    parse_when("2026-11-30", now)   # that day's 00:00 UTC
    format_elapsed(93784)           # "1-02:03:04" (Slurm's D-HH:MM:SS)

Pure (the caller passes `now`); a time without a zone is UTC. Errors are `ValueError`s whose
message says what is accepted, in the command's language (`lang`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from services.cli.lang import CliLang

AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(m|min|h|d|w)$")
UNITS = {"m": timedelta(minutes=1), "min": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1),
         "w": timedelta(weeks=1)}  # fmt: skip
NOT_A_TIME: dict[CliLang, str] = {
    CliLang.EN: "{text!r} is not a time: give a duration ago (30m, 2h, 3d, 1w), today, yesterday, a date (2026-11-30)"
                " or an ISO time (2026-11-30T08:00+08:00)",
    CliLang.ZH: "{text!r} 不是时间：请给出多久以前（30m、2h、3d、1w）、today、yesterday、日期（2026-11-30）"
                "或 ISO 时间（2026-11-30T08:00+08:00）",
}  # fmt: skip


def parse_when(text: str, now: datetime, lang: CliLang = CliLang.EN) -> datetime:
    """The moment `text` names (module docstring); ValueError naming what is accepted."""
    cleaned = text.strip().lower()
    if match := AGO.match(cleaned):
        return now - float(match[1]) * UNITS[match[2]]
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if cleaned == "today":
        return midnight
    if cleaned == "yesterday":
        return midnight - timedelta(days=1)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(NOT_A_TIME[lang].format(text=text)) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def format_elapsed(seconds: float | None) -> str:
    """D-HH:MM:SS (days only when there are some), like Slurm's TIME column; "" for None."""
    if seconds is None:
        return ""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock
