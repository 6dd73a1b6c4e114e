"""Metrics on a running system: the services' /metrics (CARDFLOW_METRICS_PORT) and the console's
/metrics carry every metric docs/operations.md lists, with values that match the system."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from services.common.runtime import Emitter
from services.console.app import create_app
from services.ledger.quotas import grant_quota
from shared.settings import Settings
from tests.helpers.console_server import free_port
from tests.helpers.prometheus_text import samples, value
from tests.helpers.running_services import poll_until
from tests.helpers.system import RunningSystem, running_system
from tests.unit.test_grafana_dashboard import dashboard_metric_names

SERVICE_METRICS = {
    "faststream_received_messages_total",
    "faststream_received_processed_messages_duration_seconds_count",
    "cardflow_outbox_backlog",
    "cardflow_consumer_lag",
    "cardflow_consumer_pending",
    "cardflow_dispatch_cycle_seconds_count",
}
STATE_METRICS = {
    "cardflow_tasks",
    "cardflow_gpus",
    "cardflow_nodes",
    "cardflow_gpu_utilisation_percent",
    "cardflow_leases",
    "cardflow_deadletter_entries",
    "cardflow_quota_remaining_gpu_hours",
    "cardflow_quota_granted_gpu_hours",
}


async def test_services_and_console_expose_the_documented_metrics(
    fresh_settings: Settings, data_dir_factory: Callable[[], Path]
) -> None:
    port = free_port()
    settings = fresh_settings.model_copy(update={"metrics_port": port})
    async with running_system(settings, data_dir_factory()) as system:
        system.start_agent("h100-m", "H100x8", time_scale=5)  # tasks run for minutes: still running when scraped
        await _grant_quota(system, "metrics", 100.0)
        await system.submit([
            {"name": "core-run", "project": "metrics", "priority_class": "core", "gpus": 2, "min_vram_gb": 80,
             "estimate_gpu_hours": 2.0, "profile": "compute"},
            {"name": "filler", "project": "metrics", "priority_class": "opportunistic", "gpus": 1,
             "min_vram_gb": 80, "estimate_gpu_hours": 2.0, "profile": "compute"},
        ])  # fmt: skip
        await system.wait_for(_both_running, timeout=180, what="both tasks running")

        async with httpx.AsyncClient() as client:

            async def scraped_services() -> dict[str, list[tuple[dict[str, str], float]]] | None:
                found = samples((await client.get(f"http://127.0.0.1:{port}/metrics")).text)
                return found if SERVICE_METRICS <= _families(found) else None

            service = await poll_until(scraped_services, timeout=60)
        assert service, "the services' /metrics never showed every documented metric"

        assert value(service, "faststream_received_messages_total", app_name="matcher") > 0
        assert value(service, "cardflow_dispatch_cycle_seconds_count", phase="plan") > 0
        assert {labels["group"] for labels, _ in service["cardflow_consumer_lag"]} >= {
            "intake", "readiness", "matcher", "dispatcher", "ledger", "console"
        }
        assert {labels["service"] for labels, _ in service["cardflow_outbox_backlog"]} >= {"intake", "dispatcher"}

        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://console") as console:
                response = await console.get("/metrics")
        assert response.status_code == 200
        state = samples(response.text)

    assert STATE_METRICS <= _families(state)
    assert dashboard_metric_names() - _families(service) - _families(state) == set()  # the dashboard has data
    assert value(state, "cardflow_nodes", card_type="H100", alive="true") == 1
    assert value(state, "cardflow_gpus", card_type="H100", status="allocated") == 3
    assert value(state, "cardflow_gpus", card_type="H100", status="borrowed") == 1
    assert value(state, "cardflow_gpus", card_type="H100", status="idle") == 5
    assert value(state, "cardflow_tasks", state="running") == 2
    assert value(state, "cardflow_leases", state="active") == 2
    assert len(state["cardflow_gpu_utilisation_percent"]) == 8
    assert value(state, "cardflow_quota_granted_gpu_hours", project="metrics") == 100.0
    assert 0 < value(state, "cardflow_quota_remaining_gpu_hours", project="metrics") <= 100.0


def _families(found: dict[str, list[tuple[dict[str, str], float]]]) -> set[str]:
    return set(found)


def _both_running(system: RunningSystem) -> bool:
    views = [system.task_by_name(name) for name in ("core-run", "filler")]
    return all(view is not None and view.state.value == "running" for view in views)


async def _grant_quota(system: RunningSystem, project: str, gpu_hours: float) -> None:
    async def ledger_ready() -> bool:
        return bool(await system.pool.fetchval("SELECT to_regclass('ledger.quotas') IS NOT NULL"))

    assert await poll_until(ledger_ready, timeout=60), "the ledger never created its tables"
    now = datetime.now(UTC)
    async with system.pool.acquire() as conn, conn.transaction():
        await grant_quota(
            conn, Emitter("ledger", "test/metrics", "user:test"), project=project, gpu_hours=gpu_hours,
            valid_from=now - timedelta(hours=1), valid_to=now + timedelta(days=30),
        )  # fmt: skip
