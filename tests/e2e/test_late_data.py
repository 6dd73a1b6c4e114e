"""Tasks whose inputs appear later wait without holding GPUs, then run once their data is there."""

from __future__ import annotations

from shared.events import TaskState, new_event_id
from shared.storage import open_data_store
from tests.helpers.system import RunningSystem


def a_task(name: str, **extra: object) -> dict[str, object]:
    return {"name": name, "project": "data", "priority_class": "standard", "gpus": 2, "estimate_gpu_hours": 2,
            "profile": "compute", **extra}  # fmt: skip


async def test_tasks_wait_for_their_inputs_without_a_lease_then_run(system: RunningSystem) -> None:
    bucket = f"e2e-{new_event_id().lower()}"
    async with open_data_store(system.settings) as store:
        await store.ensure_bucket(bucket)  # the bucket exists; the inputs do not, yet
    waiting = {
        "needs-object": [f"s3://{bucket}/raw/part-0.parquet"],
        "needs-prefix": [f"s3://{bucket}/features/2024-06/"],
        "needs-dataset": [{"dataset": "web-crawl", "version": "2024-06-01"}],
        "needs-all-three": [f"s3://{bucket}/raw/part-0.parquet", f"s3://{bucket}/features/2024-06/",
                            {"dataset": "web-crawl", "version": "2024-06-01"}],
    }  # fmt: skip
    system.start_agent("l40s-a", "L40Sx8", time_scale=3600)
    await system.submit([a_task(name, inputs=inputs) for name, inputs in waiting.items()] + [a_task("needs-nothing")])

    await system.wait_for(
        lambda s: _state("needs-nothing", s) is TaskState.SUCCEEDED
        and all(_state(name, s) is TaskState.WAITING_DATA for name in waiting),
        what="the task without inputs to finish while the others wait for data",
    )  # fmt: skip
    waiting_ids = {system.task_by_name(name).id for name in waiting}  # type: ignore[union-attr]
    assert not [e for e in system.of_type("lease.granted") if e.data.task_id in waiting_ids]
    assert await system.pool.fetchval("SELECT count(*) FROM dispatcher.leases WHERE task_id = ANY($1)", list(waiting_ids)) == 0
    assert "raw/part-0.parquet" in system.task_by_name("needs-object").reason_detail  # type: ignore[union-attr]

    made_ready_at = len(system.events)
    await system.put_object(f"s3://{bucket}/raw/part-0.parquet")
    await system.put_object(f"s3://{bucket}/features/2024-06/_READY")
    await system.signal_data_ready("web-crawl", "2024-06-01")
    await system.wait_for(
        lambda s: all(_state(name, s) is TaskState.SUCCEEDED for name in waiting), what="the waiting tasks to run"
    )

    for task_id in waiting_ids:
        first_grant = _index(system, "lease.granted", task_id)
        became_ready = _index(system, "task.readiness_changed", task_id, lambda e: e.data.ready)
        assert made_ready_at <= became_ready < first_grant


def _state(name: str, system: RunningSystem) -> TaskState | None:
    view = system.task_by_name(name)
    return view.state if view else None


def _index(system: RunningSystem, event_type: str, task_id: str, where=lambda e: True) -> int:
    """Position in the log of the first `event_type` event about `task_id` (that passes `where`)."""
    return next(i for i, e in enumerate(system.events) if e.type == event_type and e.data.task_id == task_id and where(e))
