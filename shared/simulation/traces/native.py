"""cardflow's own trace CSV.

Columns: `task_id,submit_s,gpus,duration_s` (required), then optional `estimate_s,
priority_class,project,card_type,min_vram_gb,ready_s`; also accepted (extensions) `priority,
checkpoint_interval_s,profile,heavy,trace_card,deadline_s`. Empty cells mean "not given". `card_type` may list
several acceptable types separated by `|`; durations are then on the first listed type unless
`trace_card` says otherwise. Without `card_type` the duration is card-independent.
"""

from __future__ import annotations

import csv
from pathlib import Path

from shared.scheduling.model import PriorityClass, Profile
from shared.simulation.workload import Trace, TraceTask

REQUIRED = ("task_id", "submit_s", "gpus", "duration_s")


def _optional_float(value: str | None) -> float | None:
    return None if value is None or value.strip() == "" else float(value)


def _card_types(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split("|") if part.strip())


def parse_native_row(row: dict[str, str]) -> TraceTask:
    """One CSV row as a `TraceTask` (raises ValueError on a malformed row)."""
    cards = _card_types(row.get("card_type"))
    klass = (row.get("priority_class") or "").strip()
    return TraceTask(
        task_id=row["task_id"].strip(),
        submit_s=float(row["submit_s"]),
        gpus=int(row["gpus"]),
        duration_s=float(row["duration_s"]),
        estimate_s=_optional_float(row.get("estimate_s")),
        priority_class=PriorityClass(klass) if klass else None,
        priority=int(row.get("priority") or 0),
        project=(row.get("project") or "").strip() or "default",
        card_types=cards,
        trace_card=(row.get("trace_card") or "").strip() or (cards[0] if cards else None),
        min_vram_gb=_optional_float(row.get("min_vram_gb")) or 0.0,
        ready_s=_optional_float(row.get("ready_s")),
        checkpoint_interval_s=_optional_float(row.get("checkpoint_interval_s")),
        profile=Profile((row.get("profile") or "balanced").strip()),
        heavy=(row.get("heavy") or "").strip().lower() in {"1", "true", "yes"},
        deadline_s=_optional_float(row.get("deadline_s")),
    )


def load_native(path: Path) -> Trace:
    """Read a native trace CSV."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in REQUIRED if name not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        tasks = [parse_native_row(row) for row in reader]
    return Trace(name=path.name, tasks=tuple(tasks), notes={"format": "native", "tasks": len(tasks)})
