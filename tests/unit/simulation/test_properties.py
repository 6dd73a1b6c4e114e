"""Property: in simulation, a task that holds a reservation never starts later than that reservation
because of backfill (estimates exact, data ready at submission, one class besides opportunistic work
that checkpoints — which cardflow lets fill the reservation and takes back when it is due — so only
backfill could delay it)."""

from __future__ import annotations

from typing import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.scheduling.model import Plan, PriorityClass, Profile, QueuedTask, Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.engine import Simulation
from shared.simulation.workload import SimTask


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, list[SimTask], str]:
    nodes, gpus_per_node = draw(st.integers(1, 3)), draw(st.sampled_from([2, 4]))
    capacity = nodes * gpus_per_node
    klass = draw(st.sampled_from([PriorityClass.STANDARD, PriorityClass.CORE]))
    tasks = []
    for index in range(draw(st.integers(2, 9))):
        run = float(draw(st.integers(1, 20)) * 10)
        submit = float(draw(st.integers(0, 30)) * 5)
        gpus = draw(st.integers(1, capacity))
        tasks.append(SimTask(f"t{index}", submit, gpus, run, run, klass, 0, "p", (), None, 0.0, submit, None,
                             Profile.BALANCED, False))
    for index in range(draw(st.integers(0, 4))):  # opportunistic fillers, lowest class: never reserved first
        run, submit = float(draw(st.integers(1, 200)) * 10), float(draw(st.integers(0, 30)) * 5)
        tasks.append(SimTask(f"o{index}", submit, draw(st.integers(1, 2)), run, run, PriorityClass.OPPORTUNISTIC,
                             0, "p", (), None, 0.0, submit, 600.0, Profile.BALANCED, False))
    return f"X:{nodes}x{gpus_per_node}", tasks, draw(st.sampled_from(["easy-backfill", "cardflow"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_reserved_tasks_start_no_later_than_their_reservation(scenario: tuple[str, list[SimTask], str]) -> None:
    spec, tasks, policy_name = scenario
    promised: list[tuple[str, float]] = []

    def recording_plan(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy, now: float) -> Plan:
        result = plan(snapshot, queue, policy, now)
        promised.extend((reservation.task_id, reservation.start_at) for reservation in result.reservations)
        return result

    outcome = Simulation(tasks, parse_cluster_spec(spec), POLICIES[policy_name], plan_fn=recording_plan).run()
    submit = {task.task_id: task.submit_s for task in tasks}
    started = {task_id: submit[task_id] + wait for task_id, wait in outcome.recorder.waits.items()}
    for task_id, start_at in promised:
        if task_id.startswith("o"):
            continue  # an opportunistic reservation may be overtaken by the higher class's arrivals
        assert task_id in started, f"{task_id} was promised t={start_at} and never started"
        assert started[task_id] <= start_at + 1e-6, (task_id, start_at, started[task_id])
