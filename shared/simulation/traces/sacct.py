"""Slurm accounting history: the output of `sacct -P` (pipe-separated, header line first).

Suggested command:
    sacct -a -X -P -S 2024-01-01 -E now \
      -o JobID,Submit,Start,End,Elapsed,Timelimit,AllocTRES,Partition,QOS,Account

Mapping (see docs/traces.md): job steps (`123.batch`, `123.0`) are skipped; GPUs come from
`gres/gpu=N` or `gres/gpu:TYPE=N` in AllocTRES (ReqTRES if AllocTRES is absent or empty) — a TYPE
becomes the allowed card type; jobs without GPUs and jobs that never started are skipped and
counted; duration = Elapsed; estimate = Timelimit (none for UNLIMITED / Partition_Limit); project =
Account, else Partition; class from QOS by `qos_class`.
"""

from __future__ import annotations

import csv
import re
from datetime import datetime, timezone
from pathlib import Path

from shared.scheduling.model import PriorityClass
from shared.simulation.workload import Trace, TraceTask

_GPU_TRES = re.compile(r"gres/gpu(?::(?P<type>[^=,]+))?=(?P<count>\d+)")
_CORE_WORDS = ("high", "urgent", "core", "critical", "prio")
_OPPORTUNISTIC_WORDS = ("low", "scavenger", "preempt", "opportun", "standby", "besteffort", "free")
_NOT_STARTED = {"", "unknown", "none"}


def qos_class(qos: str) -> PriorityClass | None:
    """QOS name -> class: core words win, then opportunistic words, else standard; empty -> None."""
    name = qos.strip().lower()
    if not name:
        return None
    if any(word in name for word in _CORE_WORDS):
        return PriorityClass.CORE
    if any(word in name for word in _OPPORTUNISTIC_WORDS):
        return PriorityClass.OPPORTUNISTIC
    return PriorityClass.STANDARD


def slurm_duration_s(text: str) -> float | None:
    """`[DD-][HH:]MM:SS[.fff]` -> seconds; None for UNLIMITED, Partition_Limit or empty."""
    text = text.strip()
    if not text or not text[0].isdigit():
        return None
    days, _, clock = text.rpartition("-")
    parts = [float(part) for part in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    hours, minutes, seconds = parts
    return (int(days) if days else 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def gpu_request(tres: str) -> tuple[int, tuple[str, ...]]:
    """GPU count and typed card names from a TRES string (`gres/gpu:a100=2` -> (2, ("a100",)))."""
    total_typed = sum(int(m["count"]) for m in _GPU_TRES.finditer(tres) if m["type"])
    untyped = [int(m["count"]) for m in _GPU_TRES.finditer(tres) if not m["type"]]
    types = tuple(dict.fromkeys(m["type"] for m in _GPU_TRES.finditer(tres) if m["type"]))
    return (untyped[0] if untyped else total_typed), types


def _epoch_utc(text: str) -> float:
    return datetime.fromisoformat(text.strip()).replace(tzinfo=timezone.utc).timestamp()


def _job_task(row: dict[str, str]) -> TraceTask | str:
    """A task, or the name of the counter explaining why the row is skipped."""
    if "." in row["JobID"]:
        return "skipped_job_steps"
    gpus, types = gpu_request(row.get("AllocTRES") or row.get("ReqTRES") or "")
    if gpus <= 0:
        return "skipped_without_gpus"
    if (row.get("Start") or "").strip().lower() in _NOT_STARTED:
        return "skipped_never_started"
    elapsed = slurm_duration_s(row.get("Elapsed") or "")
    if elapsed is None:
        elapsed = _epoch_utc(row["End"]) - _epoch_utc(row["Start"])
    return TraceTask(
        task_id=f"slurm-{row['JobID'].strip()}",
        submit_s=_epoch_utc(row["Submit"]),
        gpus=gpus,
        duration_s=elapsed,
        estimate_s=slurm_duration_s(row.get("Timelimit") or ""),
        priority_class=qos_class(row.get("QOS") or ""),
        project=(row.get("Account") or "").strip() or (row.get("Partition") or "").strip() or "default",
        card_types=types,
        trace_card=types[0] if types else None,
    )


def load_sacct(path: Path) -> Trace:
    """Read `sacct -P` output into a `Trace`."""
    tasks: list[TraceTask] = []
    counts = {"skipped_job_steps": 0, "skipped_without_gpus": 0, "skipped_never_started": 0}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle, delimiter="|"):
            outcome = _job_task(row)
            if isinstance(outcome, str):
                counts[outcome] += 1
            else:
                tasks.append(outcome)
    return Trace(name=path.name, tasks=tuple(tasks), notes={"format": "sacct", "tasks": len(tasks), **counts})
