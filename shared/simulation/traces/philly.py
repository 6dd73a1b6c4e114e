"""Microsoft Philly job table (`timestamp,duration,num_gpus,gpu_time,cluster`).

`timestamp` is the submit time (UTC, `YYYY-MM-DD HH:MM:SS`), `duration` the run time in seconds,
`cluster` the virtual cluster, used as the project (quota account). Philly had one GPU type, so
every duration is taken as measured on `PHILLY_CARD`. The trace has no class, estimate or readiness.
"""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

from shared.simulation.workload import Trace, TraceTask

PHILLY_CARD = "V100"


def _epoch_utc(text: str) -> float:
    return datetime.fromisoformat(text.strip()).replace(tzinfo=timezone.utc).timestamp()


def load_philly(path: Path) -> Trace:
    """Read a Philly job CSV; jobs without GPUs are skipped and counted."""
    tasks: list[TraceTask] = []
    skipped = 0
    with path.open(newline="") as handle:
        for index, row in enumerate(csv.DictReader(handle)):
            gpus = int(float(row["num_gpus"]))
            if gpus <= 0:
                skipped += 1
                continue
            tasks.append(
                TraceTask(
                    task_id=f"philly-{index:06d}",
                    submit_s=_epoch_utc(row["timestamp"]),
                    gpus=gpus,
                    duration_s=float(row["duration"]),
                    project=row["cluster"].strip(),
                    trace_card=PHILLY_CARD,
                )
            )
    notes = {"format": "philly", "tasks": len(tasks), "skipped_without_gpus": skipped, "card": PHILLY_CARD}
    return Trace(name=path.name, tasks=tuple(tasks), notes=notes)
