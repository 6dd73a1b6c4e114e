"""What one GPU-host agent tells Prometheus: the agent's side of the fleet, per agent id.

The console's `/metrics` shows the fleet as the dispatcher sees it (from the read models); an
agent's own metrics show what only the host knows — whether it reaches Redis right now, the runs
it has going, each GPU's utilisation, reports it could not write yet, and how it decided on the
commands it read. The gauges are set at every heartbeat; `cardflow agent` serves them on
`CARDFLOW_METRICS_PORT` when that is set (docs/operations.md lists them).
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.events.reports import GpuUtilisation

from services.agent.state import Ignore, Refuse, Start, Stop
from services.observability.metrics import (
    AGENT_COMMANDS, AGENT_CONNECTED, AGENT_GPU_UTIL, AGENT_LEASES, AGENT_REGISTRATIONS, AGENT_REPORTS_UNSENT, AGENT_RUNS,
)  # fmt: skip

DECISION_LABELS: dict[type, str] = {Start: "start", Stop: "stop", Refuse: "refuse", Ignore: "ignore"}
"""The `decision` label of `cardflow_agent_commands_total` per decision of `AgentState.on_command`."""


class AgentMetrics:
    """The metric series of one agent (label `agent` = its id)."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id

    def heartbeat(self, *, connected: bool, leases: int, runs: int, unsent: int, gpus: Iterable[GpuUtilisation]) -> None:
        """The state after one heartbeat attempt (GPU utilisation only when it was read)."""
        AGENT_CONNECTED.labels(self.agent_id).set(1 if connected else 0)
        AGENT_LEASES.labels(self.agent_id).set(leases)
        AGENT_RUNS.labels(self.agent_id).set(runs)
        AGENT_REPORTS_UNSENT.labels(self.agent_id).set(unsent)
        for gpu in gpus:
            AGENT_GPU_UTIL.labels(self.agent_id, str(gpu.index)).set(gpu.util_pct)

    def command(self, decision: object) -> None:
        """One inbox command handled; `decision` is what `AgentState.on_command` returned."""
        label = DECISION_LABELS.get(type(decision))
        if label is not None:
            AGENT_COMMANDS.labels(self.agent_id, label).inc()

    def registered(self) -> None:
        AGENT_REGISTRATIONS.labels(self.agent_id).inc()
