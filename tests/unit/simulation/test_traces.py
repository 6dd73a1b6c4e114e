"""Importers on tiny slices written by the test in each format (the real traces stay in place)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.scheduling.model import PriorityClass
from shared.simulation.traces import load_trace
from shared.simulation.traces.sacct import gpu_request, qos_class, slurm_duration_s
from shared.simulation.workload import resolve


def write(path: Path, text: str) -> Path:
    path.write_text(text.strip() + "\n")
    return path


def test_native_reads_required_and_optional_columns(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path / "t.csv", """
task_id,submit_s,gpus,duration_s,estimate_s,priority_class,project,card_type,min_vram_gb,ready_s
a,0,2,100,150,core,vision,H100|A100-80G,40,30
b,5,1,50,,,,,,
"""))
    a, b = trace.tasks
    assert (a.gpus, a.estimate_s, a.priority_class, a.project) == (2, 150.0, PriorityClass.CORE, "vision")
    assert (a.card_types, a.trace_card, a.min_vram_gb, a.ready_s) == (("H100", "A100-80G"), "H100", 40.0, 30.0)
    assert (b.estimate_s, b.priority_class, b.project, b.card_types, b.ready_s) == (None, None, "default", (), None)
    resolved = resolve(b)
    assert (resolved.estimate_s, resolved.ready_s, resolved.priority_class) == (50.0, 5.0, PriorityClass.STANDARD)


def test_native_rejects_missing_required_columns(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duration_s"):
        load_trace(write(tmp_path / "t.csv", "task_id,submit_s,gpus\na,0,1"))


def test_philly_maps_cluster_to_project_and_every_job_to_v100(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path / "p.csv", """
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,8,23608.0,6214e9
2017-10-09 06:13:04,10.0,0,0.0,6214e9
"""), "philly")
    first, second = trace.tasks
    assert trace.notes["skipped_without_gpus"] == 1
    assert (first.project, first.gpus, first.duration_s, first.trace_card) == ("11cb48", 1, 66.0, "V100")
    assert first.submit_s - second.submit_s == pytest.approx(48 * 60 + 52)
    assert first.submit_s == pytest.approx(1507532515.0)  # 2017-10-09 07:01:55 UTC
    assert first.estimate_s is None and first.priority_class is None


OPENB_PODS = """
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-0,12000,16384,1,1000,,LS,Running,0,500,10
pod-1,6000,12288,1,460,T4,BE,Running,100,400,100
pod-2,6000,12288,0,0,,BE,Running,100,400,100
pod-3,6000,12288,8,1000,V100M16|V100M32|V100M32,Burstable,Succeeded,200,900,300
pod-4,6000,12288,1,1000,,Guaranteed,Pending,250,300,
"""
OPENB_NODES = """
sn,cpu_milli,memory_mib,gpu,model
node-0,64000,262144,2,T4
node-1,96000,786432,8,V100M32
node-2,32000,262144,0,
"""


def test_openb_rounds_fractions_skips_cpu_only_and_reads_the_node_list(tmp_path: Path) -> None:
    write(tmp_path / "openb_node_list_gpu_node.csv", OPENB_NODES)
    trace = load_trace(write(tmp_path / "openb_pod_list_x.csv", OPENB_PODS), "openb")
    assert [t.task_id for t in trace.tasks] == ["pod-0", "pod-1", "pod-3"]
    notes = trace.notes
    assert (notes["skipped_cpu_only"], notes["fractional_rounded_up"], notes["skipped_never_scheduled"]) == (1, 1, 1)
    pod0, pod1, pod3 = trace.tasks
    assert (pod0.duration_s, pod0.priority_class, pod0.card_types) == (490.0, PriorityClass.CORE, ())
    assert (pod1.gpus, pod1.priority_class, pod1.card_types) == (1, PriorityClass.OPPORTUNISTIC, ("T4",))
    assert (pod3.gpus, pod3.priority_class, pod3.card_types) == (8, PriorityClass.STANDARD, ("V100M16", "V100M32"))
    assert trace.cluster_nodes == (("node-0", "T4", 2), ("node-1", "V100M32", 8))


SACCT = """
JobID|Submit|Start|End|Elapsed|Timelimit|AllocTRES|Partition|QOS
101|2024-01-05T10:00:00|2024-01-05T10:05:00|2024-01-05T12:05:00|02:00:00|1-00:00:00|cpu=8,mem=64G,node=1,billing=8,gres/gpu:a100=4,gres/gpu=4|gpu|high
101.batch|2024-01-05T10:05:00|2024-01-05T10:05:00|2024-01-05T12:05:00|02:00:00||cpu=8,gres/gpu=4|||
102|2024-01-05T10:01:00|2024-01-05T10:06:00|2024-01-05T10:16:00|00:10:00|UNLIMITED|cpu=2,mem=8G,node=1,gres/gpu=1|debug|scavenger
103|2024-01-05T10:02:00|2024-01-05T10:03:00|2024-01-05T10:04:00|00:01:00|00:30:00|cpu=2,mem=8G,node=1|cpu|normal
104|2024-01-05T10:03:00|Unknown|Unknown|00:00:00|00:30:00|gres/gpu=2|gpu|normal
"""


def test_sacct_reads_gpus_limits_and_qos_classes(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path / "sacct.txt", SACCT), "sacct")
    notes = trace.notes
    assert (notes["skipped_job_steps"], notes["skipped_without_gpus"], notes["skipped_never_started"]) == (1, 1, 1)
    first, second = trace.tasks
    assert (first.task_id, first.gpus, first.card_types, first.project) == ("slurm-101", 4, ("a100",), "gpu")
    assert (first.duration_s, first.estimate_s, first.priority_class) == (7200.0, 86400.0, PriorityClass.CORE)
    assert (second.gpus, second.estimate_s, second.priority_class) == (1, None, PriorityClass.OPPORTUNISTIC)
    assert second.submit_s - first.submit_s == 60


@pytest.mark.parametrize(("text", "seconds"), [
    ("00:10:00", 600), ("1-02:03:04", 93784), ("45:00", 2700), ("UNLIMITED", None), ("Partition_Limit", None),
])
def test_slurm_durations(text: str, seconds: float | None) -> None:
    assert slurm_duration_s(text) == seconds


def test_qos_and_tres_mappings() -> None:
    assert [qos_class(q) for q in ("high", "normal", "scavenger", "")] == [
        PriorityClass.CORE, PriorityClass.STANDARD, PriorityClass.OPPORTUNISTIC, None]
    assert gpu_request("cpu=4,gres/gpu:h100=2,gres/gpu:a100=1") == (3, ("h100", "a100"))
    assert gpu_request("cpu=4,mem=1G") == (0, ())


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(tmp_path / "x.csv", "parquet")
