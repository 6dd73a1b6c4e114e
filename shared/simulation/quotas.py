"""Quota accounts for a simulation: read from a CSV or synthesized from the workload.

CSV columns: `project,gpu_hours,valid_from_s,valid_to_s`. A project without an account is
unlimited. Synthesized accounts give each project `quota_factor` x its demand, valid from the first
submission until `quota_grace_s` after the project's last submission.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable

from shared.scheduling.model import QuotaAccount
from shared.simulation.synthesize import SynthesisParams
from shared.simulation.workload import SimTask


def load_quota_csv(path: Path) -> dict[str, QuotaAccount]:
    """Accounts by project from a quota CSV."""
    with path.open(newline="") as handle:
        return {
            row["project"].strip(): QuotaAccount(
                project=row["project"].strip(),
                remaining_gpu_hours=float(row["gpu_hours"]),
                valid_from=float(row["valid_from_s"]),
                valid_to=float(row["valid_to_s"]),
            )
            for row in csv.DictReader(handle)
        }


def synthesize_quotas(tasks: Iterable[SimTask], params: SynthesisParams) -> dict[str, QuotaAccount]:
    """One account per project: factor x demand GPU-hours, expiring a grace period after its last task."""
    demand: dict[str, float] = {}
    last_submit: dict[str, float] = {}
    first = float("inf")
    for task in tasks:
        demand[task.project] = demand.get(task.project, 0.0) + task.gpus * task.duration_s / 3600.0
        last_submit[task.project] = max(last_submit.get(task.project, task.submit_s), task.submit_s)
        first = min(first, task.submit_s)
    return {
        project: QuotaAccount(
            project=project,
            remaining_gpu_hours=params.quota_factor * hours,
            valid_from=first,
            valid_to=last_submit[project] + params.quota_grace_s,
        )
        for project, hours in sorted(demand.items())
    }
