"""Alibaba cluster-trace-gpu-v2023 ("openb"): a pod list plus, when present, its node list.

Mapping (see docs/traces.md):
- submit = `creation_time`; duration = `deletion_time - scheduled_time` (the pod's run time);
  pods never scheduled (no `scheduled_time`) have no run time and are skipped and counted;
- `num_gpu == 0` (CPU-only) pods are skipped and counted; a fractional GPU (`gpu_milli < 1000`)
  is rounded up to one whole GPU and counted;
- `gpu_spec` (`A|B`) = allowed card types (empty = any); durations are card-independent;
- `qos` -> class: `QOS_CLASSES`;
- `openb_node_list_gpu_node.csv` next to the pod list (or given) = the cluster (`sn`, `model`, `gpu`).
"""

from __future__ import annotations

import csv
from pathlib import Path

from shared.scheduling.model import PriorityClass
from shared.simulation.workload import Trace, TraceTask

NODE_LIST_NAME = "openb_node_list_gpu_node.csv"

QOS_CLASSES = {
    "LS": PriorityClass.CORE,  # latency-sensitive services: the work the fleet exists for
    "Guaranteed": PriorityClass.CORE,  # Kubernetes Guaranteed: requests == limits, never evicted first
    "Burstable": PriorityClass.STANDARD,
    "BE": PriorityClass.OPPORTUNISTIC,  # best effort: runs on what is idle, evicted first
}


def _card_types(spec: str) -> tuple[str, ...]:
    """`A|B|B` -> ("A", "B"): allowed types, first occurrence order, duplicates dropped."""
    return tuple(dict.fromkeys(part.strip() for part in spec.split("|") if part.strip()))


def _pod_task(row: dict[str, str]) -> TraceTask:
    scheduled = float(row["scheduled_time"])
    return TraceTask(
        task_id=row["name"].strip(),
        submit_s=float(row["creation_time"]),
        gpus=max(1, int(row["num_gpu"])),
        duration_s=max(0.0, float(row["deletion_time"]) - scheduled),
        project=f"qos-{row['qos'].strip()}",
        priority_class=QOS_CLASSES.get(row["qos"].strip()),
        card_types=_card_types(row.get("gpu_spec") or ""),
    )


def load_openb_nodes(path: Path) -> tuple[tuple[str, str, int], ...]:
    """The GPU nodes of an openb node list as `(node_id, card_type, gpus)`; GPU-less nodes dropped."""
    with path.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if int(row["gpu"] or 0) > 0]
    return tuple((row["sn"].strip(), row["model"].strip(), int(row["gpu"])) for row in rows)


def load_openb(path: Path, node_list: Path | None = None) -> Trace:
    """Read an openb pod list (and its node list, if found) into a `Trace`."""
    tasks: list[TraceTask] = []
    counts = {"skipped_cpu_only": 0, "skipped_never_scheduled": 0, "fractional_rounded_up": 0}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if int(row["num_gpu"] or 0) == 0:
                counts["skipped_cpu_only"] += 1
            elif not (row.get("scheduled_time") or "").strip():
                counts["skipped_never_scheduled"] += 1
            else:
                counts["fractional_rounded_up"] += int(int(row["gpu_milli"] or 1000) < 1000)
                tasks.append(_pod_task(row))
    node_path = node_list or path.with_name(NODE_LIST_NAME)
    nodes = load_openb_nodes(node_path) if node_path.exists() else ()
    notes = {"format": "openb", "tasks": len(tasks), **counts, "node_list": node_path.name if nodes else None}
    return Trace(name=path.name, tasks=tuple(tasks), notes=notes, cluster_nodes=nodes)
