"""Every cardflow metric, defined once per process on prometheus_client's default registry.

Who exports what (docs/operations.md lists each metric with its labels and meaning):

- every service (`cardflow service NAME`, when `CARDFLOW_METRICS_PORT` is set): FastStream's
  `faststream_*` message-handling metrics (`app_name` = the service), its outbox backlog and the lag
  and pending entries of its consumer groups (`services.observability.delivery`);
- the dispatcher: cycle timings per phase (`observe_cycle`);
- every GPU-host agent (`cardflow agent`, when `CARDFLOW_METRICS_PORT` is set): whether it reaches
  Redis, leases held and runs active, per-GPU utilisation, reports not yet written, commands by
  decision, registrations (`services.agent.metrics`);
- the console (`GET /metrics`): the system's state read from the read models at scrape time —
  tasks by state, class and reason, GPUs per card type and status, utilisation, leases, dead
  letters, quota left (`services.observability.system_state`).

Several services may run in one process (tests, `cardflow up` does not): the metrics are shared and
carry a `service` label where two services could report the same series.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

NAMESPACE = "cardflow"

# ---- delivery (every service) --------------------------------------------------------------
OUTBOX_BACKLOG = Gauge(
    "outbox_backlog", "Events in the service's outbox not yet published to Redis", ["service"], namespace=NAMESPACE
)
CONSUMER_LAG = Gauge(
    "consumer_lag",
    "Entries of the stream not yet delivered to the consumer group",
    ["stream", "group"],
    namespace=NAMESPACE,
)
CONSUMER_PENDING = Gauge(
    "consumer_pending", "Entries delivered to the group but not yet acknowledged", ["stream", "group"], namespace=NAMESPACE
)

# ---- the dispatcher cycle --------------------------------------------------------------------
CYCLE_SECONDS = Histogram(
    "dispatch_cycle_seconds",
    "Time of one dispatcher cycle's phase: load (open the cycle's transaction, leader epoch checked),"
    " plan (snapshot and queue from memory, the pure decision), persist (fold, save, commit)",
    ["phase"],
    namespace=NAMESPACE,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

# ---- a GPU-host agent -------------------------------------------------------------------------
AGENT_CONNECTED = Gauge("agent_connected", "1 while the agent's last heartbeat reached Redis, else 0", ["agent"],
                        namespace=NAMESPACE)  # fmt: skip
AGENT_LEASES = Gauge("agent_leases_held", "Leases the agent holds (running or stopping)", ["agent"], namespace=NAMESPACE)
AGENT_RUNS = Gauge("agent_runs_active", "Runs that have not reported their exit yet", ["agent"], namespace=NAMESPACE)
AGENT_GPU_UTIL = Gauge("agent_gpu_utilisation_percent", "Utilisation of each GPU of the node at the last heartbeat",
                       ["agent", "gpu"], namespace=NAMESPACE)  # fmt: skip
AGENT_REPORTS_UNSENT = Gauge("agent_reports_unsent", "Reports queued in the agent, not yet written to cf:reports",
                             ["agent"], namespace=NAMESPACE)  # fmt: skip
AGENT_COMMANDS = Counter("agent_commands", "Inbox commands handled, by the agent's decision (start, stop, refuse, ignore)",
                         ["agent", "decision"], namespace=NAMESPACE)  # fmt: skip
AGENT_REGISTRATIONS = Counter("agent_registrations", "Registrations sent (at start, every few seconds, after Redis came back)",
                              ["agent"], namespace=NAMESPACE)  # fmt: skip

# ---- the system's state (the console, at scrape time) ------------------------------------------
TASKS = Gauge(
    "tasks",
    "Tasks not yet finished, by state, priority class and the reason they wait (or run)",
    ["state", "priority_class", "reason"],
    namespace=NAMESPACE,
)
GPUS = Gauge(
    "gpus",
    "GPUs of live nodes per card type: allocated (in an active lease), idle, and borrowed (allocated to"
    " opportunistic work, which yields them to core work)",
    ["card_type", "status"],
    namespace=NAMESPACE,
)
NODES = Gauge("nodes", "Registered nodes per card type, alive or lost", ["card_type", "alive"], namespace=NAMESPACE)
GPU_UTILISATION = Gauge(
    "gpu_utilisation_percent",
    "Utilisation each GPU of a live node last reported through its agent's heartbeat",
    ["card_type", "node", "gpu"],
    namespace=NAMESPACE,
)
LEASES = Gauge(
    "leases", "Leases: active ones, and ended ones by how they ended", ["state"], namespace=NAMESPACE
)
DEADLETTERS = Gauge("deadletter_entries", "Entries in the dead-letter stream cf:deadletter", namespace=NAMESPACE)
QUOTA_REMAINING = Gauge(
    "quota_remaining_gpu_hours",
    "GPU-hours left on each quota account in force",
    ["project", "account", "card_type"],
    namespace=NAMESPACE,
)
QUOTA_GRANTED = Gauge(
    "quota_granted_gpu_hours", "GPU-hours granted on each quota account in force", ["project", "account", "card_type"],
    namespace=NAMESPACE,
)

_served: dict[int, object] = {}
_lock = threading.Lock()


def serve_metrics(port: int, address: str = "0.0.0.0") -> None:  # noqa: S104 - scraped from other hosts
    """Serve `/metrics` of this process on `port` (once per process and port; later calls do nothing)."""
    with _lock:
        if port not in _served:
            server, _thread = start_http_server(port, addr=address, registry=REGISTRY)
            _served[port] = server


def observe_cycle(load_s: float, plan_s: float | None = None, persist_s: float | None = None) -> None:
    """Record one dispatcher cycle's phase times (plan and persist are None when nothing was queued)."""
    CYCLE_SECONDS.labels("load").observe(load_s)
    if plan_s is not None:
        CYCLE_SECONDS.labels("plan").observe(plan_s)
    if persist_s is not None:
        CYCLE_SECONDS.labels("persist").observe(persist_s)
