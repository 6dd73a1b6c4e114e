"""Readable builders for scheduling-core tests: `a_node("n1").card("H100").free(4)`.

Every builder has sensible defaults (an 8-GPU H100 node with every GPU free; a standard 1-GPU task
of project "p" on H100 for an hour, submitted at t=0) so a test states only what it is about.
`run(...)` accepts builders or built values and calls the real `plan()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from shared.scheduling.model import (
    CardOption,
    Deferral,
    DeferralReason,
    Grant,
    Node,
    Plan,
    PriorityClass,
    QueuedTask,
    QuotaAccount,
    RunningLease,
    Snapshot,
)
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.plan import plan

HOUR = 3600.0
NOW = 100_000.0


class NodeBuilder:
    def __init__(self, node_id: str) -> None:
        self._node = Node(node_id=node_id, card_type="H100", gpus=8, free=frozenset(range(8)))
        self._free_count: int | None = None

    def card(self, card_type: str) -> NodeBuilder:
        self._node = replace(self._node, card_type=card_type)
        return self

    def gpus(self, count: int) -> NodeBuilder:
        self._node = replace(self._node, gpus=count, free=frozenset(range(count)))
        return self

    def free(self, count: int) -> NodeBuilder:
        """`count` free GPUs: the highest indices (the lowest ones are busy)."""
        self._free_count = count
        return self

    def free_indices(self, *indices: int) -> NodeBuilder:
        self._node = replace(self._node, free=frozenset(indices))
        return self

    def heavy(self, running: int) -> NodeBuilder:
        self._node = replace(self._node, heavy_running=running)
        return self

    def build(self) -> Node:
        if self._free_count is None:
            return self._node
        gpus = self._node.gpus
        return replace(self._node, free=frozenset(range(gpus - self._free_count, gpus)))


class TaskBuilder:
    def __init__(self, task_id: str) -> None:
        self._task = QueuedTask(
            task_id=task_id, project="p", priority_class=PriorityClass.STANDARD, priority=0, gpus=1,
            submitted_at=0.0, options=(CardOption("H100", HOUR, 1.0),),
        )

    def _set(self, **changes) -> TaskBuilder:
        self._task = replace(self._task, **changes)
        return self

    def core(self) -> TaskBuilder:
        return self._set(priority_class=PriorityClass.CORE)

    def standard(self) -> TaskBuilder:
        return self._set(priority_class=PriorityClass.STANDARD)

    def opportunistic(self) -> TaskBuilder:
        return self._set(priority_class=PriorityClass.OPPORTUNISTIC)

    def priority(self, value: int) -> TaskBuilder:
        return self._set(priority=value)

    def gpus(self, count: int) -> TaskBuilder:
        return self._set(gpus=count)

    def submitted(self, at: float) -> TaskBuilder:
        return self._set(submitted_at=at)

    def project(self, name: str) -> TaskBuilder:
        return self._set(project=name)

    def on(self, *cards: str | tuple[str, float]) -> TaskBuilder:
        """Card options in matcher order: "H100" (runs an hour) or ("H100", runtime_s)."""
        options = []
        for card in cards:
            card_type, runtime = (card, HOUR) if isinstance(card, str) else card
            options.append(CardOption(card_type, runtime, runtime / HOUR))
        return self._set(options=tuple(options))

    def runs(self, seconds: float) -> TaskBuilder:
        return self._set(options=tuple(replace(option, runtime_s=seconds) for option in self._task.options))

    def unmatched(self) -> TaskBuilder:
        return self._set(options=())

    def not_ready(self) -> TaskBuilder:
        return self._set(data_ready=False)

    def unapproved(self) -> TaskBuilder:
        return self._set(approved=False)

    def heavy(self) -> TaskBuilder:
        return self._set(heavy=True)

    def deadline(self, at: float | None) -> TaskBuilder:
        return self._set(deadline=at)

    def checkpoints(self, every_s: float = 1800.0) -> TaskBuilder:
        return self._set(checkpoint_interval_s=every_s)

    def build(self) -> QueuedTask:
        return self._task


class LeaseBuilder:
    def __init__(self, lease_id: str) -> None:
        self._lease = RunningLease(
            lease_id=lease_id, task_id=f"run-{lease_id}", project="p", priority_class=PriorityClass.STANDARD,
            node_id="n1", card_type="H100", gpu_indices=(0,), started_at=0.0, estimated_end=NOW + HOUR,
        )

    def _set(self, **changes) -> LeaseBuilder:
        self._lease = replace(self._lease, **changes)
        return self

    def on(self, node_id: str, card_type: str = "H100") -> LeaseBuilder:
        return self._set(node_id=node_id, card_type=card_type)

    def gpus(self, *indices: int) -> LeaseBuilder:
        return self._set(gpu_indices=tuple(indices))

    def opportunistic(self) -> LeaseBuilder:
        return self._set(priority_class=PriorityClass.OPPORTUNISTIC)

    def core(self) -> LeaseBuilder:
        return self._set(priority_class=PriorityClass.CORE)

    def started(self, at: float) -> LeaseBuilder:
        return self._set(started_at=at)

    def checkpoints_on_preempt(self) -> LeaseBuilder:
        return self._set(checkpoints_on_preempt=True)

    def ends(self, at: float) -> LeaseBuilder:
        return self._set(estimated_end=at)

    def checkpointed(self, at: float) -> LeaseBuilder:
        return self._set(last_checkpoint_at=at)

    def heavy(self) -> LeaseBuilder:
        return self._set(heavy=True)

    def borrows_headroom(self) -> LeaseBuilder:
        return self._set(borrowed_headroom=True)

    def of_task(self, task_id: str) -> LeaseBuilder:
        """The lease's task (a task spanning nodes holds one lease per node)."""
        return self._set(task_id=task_id)

    def submitted(self, at: float) -> LeaseBuilder:
        """When the lease's task was submitted (the fifo order ranks by it)."""
        return self._set(submitted_at=at)

    def build(self) -> RunningLease:
        return self._lease


def a_node(node_id: str) -> NodeBuilder:
    return NodeBuilder(node_id)


def a_task(task_id: str) -> TaskBuilder:
    return TaskBuilder(task_id)


def a_lease(lease_id: str) -> LeaseBuilder:
    return LeaseBuilder(lease_id)


def a_quota(project: str = "p", gpu_hours: float = 100.0, valid_from: float = 0.0,
            valid_to: float = NOW + 365 * 24 * HOUR, card_type: str | None = None, account_id: str = "") -> QuotaAccount:
    return QuotaAccount(project, gpu_hours, valid_from, valid_to, card_type=card_type, account_id=account_id)


def a_full_fleet_around(on_a: LeaseBuilder, on_b: LeaseBuilder | None = None,
                        ) -> tuple[list[NodeBuilder], list[LeaseBuilder]]:
    """16 GPUs on nodes a and b, all busy: `on_a` on node a's GPUs 0-3 (and `on_b`, if given, on node b's),
    core work on the rest."""
    core_on_b = a_lease("Lb").on("b").gpus(*(range(8) if on_b is None else range(4, 8))).core().ends(NOW + 9 * HOUR)
    victims = [on_a] if on_b is None else [on_a, on_b]
    return [a_node("a").free(0), a_node("b").free(0)], [
        *victims, a_lease("La").on("a").gpus(4, 5, 6, 7).core().ends(NOW + 9 * HOUR), core_on_b,
    ]


def built(item):
    return item.build() if hasattr(item, "build") else item


# Preemption at once and whatever it costs: for tests of the preemption mechanics themselves (the
# cardflow defaults wait `preempt_after_s` and protect leases that would lose much; tested separately).
IMMEDIATE_PREEMPTION = dict(preempt_after_s=0.0, preempt_max_lost_gpu_hours=float("inf"))


def run(nodes: Iterable, tasks: Iterable, leases: Iterable = (), quotas: Iterable[QuotaAccount] = (),
        policy: Policy | None = None, now: float = NOW, **policy_changes) -> Plan:
    """Plan one cycle over built or builder inputs (policy: cardflow defaults, overridable)."""
    chosen = replace(policy or Policy(), **policy_changes)
    snapshot = Snapshot(
        nodes=tuple(built(node) for node in nodes),
        leases=tuple(built(lease) for lease in leases),
        quotas={quota.account_id or quota.project: quota for quota in quotas},
    )
    return plan(snapshot, [built(task) for task in tasks], chosen, now)


def grants(result: Plan) -> dict[str, Grant]:
    return {grant.task_id: grant for grant in result.grants}


def deferrals(result: Plan) -> dict[str, Deferral]:
    return {deferral.task_id: deferral for deferral in result.deferrals}


def reason_of(result: Plan, task_id: str) -> DeferralReason:
    return deferrals(result)[task_id].reason


def nodes_of(grant: Grant) -> list[str]:
    return [placement.node_id for placement in grant.placements]


def as_quotas(mapping: Mapping[str, QuotaAccount]) -> list[QuotaAccount]:
    return list(mapping.values())
