"""The Jinja2 environment of the console pages and the board snapshot, with its filters.

Filters take the language from the template context (`lang`): `duration` (seconds as "3 h 20 min" /
"3 小时 20 分"), `since` (an ISO time as a duration until `now`), `when` (an ISO time as
"2026-12-01 13:45 UTC"), `num` (a number with thousands separators), `sig` (significant digits),
`review_reason` (a match review's reason, rendered from its facts in the page's language).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape

from services.console.labels import (
    BLOCKER_LABELS, GPU_STATUS_LABELS, PAGE_LABELS, PROFILE_LABELS, REASON_LABELS_ZH, STATE_LABELS, UI_LABELS, Language, refusal_label,
)  # fmt: skip
from services.console.labels_accountability import ACCOUNTABILITY_LABELS
from services.ledger.review_reasons import review_reason_text

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
_UNITS: dict[str, tuple[str, str, str, str]] = {"en": ("d", "h", "min", "s"), "zh": ("天", "小时", "分", "秒")}


@dataclass(frozen=True)
class Unavailable:
    """An endpoint's error, shown on a page instead of its data (`{% if x is unavailable %}`)."""

    status: int
    detail: str


def duration_text(seconds: float | None, lang: str = "en") -> str:
    """A duration as its two largest units: "2 d 3 h", "3 h 20 min", "45 s"."""
    if seconds is None:
        return "—"
    day, hour, minute, second = _UNITS.get(lang, _UNITS["en"])
    s = max(0, int(seconds))
    parts = [(s // 86400, day), (s % 86400 // 3600, hour), (s % 3600 // 60, minute), (s % 60, second)]
    shown = [f"{n} {unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or f"0 {second}"


def parse_time(value: str | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


@pass_context
def _duration(context: Any, seconds: float | None) -> str:
    return duration_text(seconds, context.get("lang", "en"))


@pass_context
def _since(context: Any, value: str | datetime | None) -> str:
    at = parse_time(value)
    now = context.get("now") or datetime.now(UTC)
    return duration_text((now - at).total_seconds(), context.get("lang", "en")) if at else "—"


@pass_context
def _review_reason(context: Any, review: dict[str, Any]) -> str:
    return review_reason_text(review, context.get("lang", "en"))


def _when(value: str | datetime | None) -> str:
    at = parse_time(value)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at else "—"


def _num(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _sig(value: float | None, digits: int = 4) -> str:
    """A number with `digits` significant digits (small unit costs stay readable: 0.0001234)."""
    return "—" if value is None else f"{value:.{digits}g}"


def labels_for(lang: Language) -> dict[str, Any]:
    """Everything a template needs to say things in `lang`."""
    return {
        "L": {**UI_LABELS[lang], **PAGE_LABELS[lang], **ACCOUNTABILITY_LABELS[lang]},
        "STATES": STATE_LABELS[lang],
        "BLOCKERS": BLOCKER_LABELS[lang],
        "GPU_STATUS": GPU_STATUS_LABELS[lang],
        "PROFILES": PROFILE_LABELS[lang],
        "REASONS": REASON_LABELS_ZH if lang == "zh" else {},
        "lang": lang,
        "refusal_label": lambda status: refusal_label(status, lang),
    }


environment = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]),
                          trim_blocks=True, lstrip_blocks=True)  # fmt: skip
environment.filters.update(duration=_duration, since=_since, when=_when, num=_num, sig=_sig,
                           review_reason=_review_reason)
environment.tests["unavailable"] = lambda value: isinstance(value, Unavailable)


def render_snapshot_html(board: dict[str, Any], lang: Language, taken_at: datetime) -> str:
    """A self-contained page of the board (inline CSS, no script), as stored in the reports bucket."""
    return environment.get_template("snapshot.html").render(board=board, now=taken_at, **labels_for(lang))
