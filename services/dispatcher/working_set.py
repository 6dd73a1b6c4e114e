"""`WorkingSet`: the leader's state in memory — open tasks, active leases, nodes, quotas, the queue.

The leader loads it once (`store.load_everything`) when it takes over, or again after a gap (a write
step that failed: its outcome is unknown, so memory may no longer match the tables). Every write
step then folds over it and, once its transaction has committed, `apply`s the same changes it
wrote, so memory and tables move together. It keeps:

- every task that is not final, and final ones that still have an active lease (other parts of a
  multi-node grant being stopped); a final task leaves memory with its last lease;
- every ACTIVE lease (an ended one leaves memory; a report naming it is looked up in the table);
- every node, every quota account with the GPU-seconds it counted;
- indexes: active leases per task and per node, the queue (`QueuedTask`s of tasks in the queue,
  built once per change; also kept sorted between cycles for `plan()`, `kept_queue`), the tasks whose preemption victims are still checkpointing, and the
  queued tasks a reviewer approved;
- the fleet as `plan()` sees it, kept between cycles (`snapshot`: a `KeptSnapshot` brought up to date
  from the leases and nodes touched since, its quotas from each account's promised GPU-seconds kept the
  same way, `KeptPromises`, and worked out for `now`). A reload makes a new working set, so the snapshot
  and the promises are then built from scratch.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.leasing.promises import KeptPromises, promise_of
from shared.leasing.records import LeaseBook, LeaseRecord, NodeRecord, QuotaRecord, TaskRecord
from shared.leasing.snapshot import build_snapshot, fleet_node, running_lease, runs
from shared.leasing.work import BookChanges
from shared.scheduling.kept_snapshot import KeptSnapshot
from shared.scheduling.model import Node, QueuedTask, QuotaAccount, RunningLease
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordered_queue import OrderedQueue


@dataclass
class WorkingSet:
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    leases: dict[str, LeaseRecord] = field(default_factory=dict)  # active leases only
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    accounts: dict[str, QuotaRecord] = field(default_factory=dict)
    by_task: dict[str, set[str]] = field(default_factory=dict)
    by_node: dict[str, set[str]] = field(default_factory=dict)
    queue: dict[str, QueuedTask] = field(default_factory=dict)
    preempted_for: dict[str, str] = field(default_factory=dict)  # preempting lease id -> the task it yields to
    approved: set[str] = field(default_factory=set)  # tasks in the queue a reviewer approved
    # The queue kept sorted between cycles (`kept_queue`), and the tasks touched since it was last
    # brought up to date: task id -> as the kept queue holds it (None: not in it).
    _kept: OrderedQueue | None = field(default=None, init=False, repr=False, compare=False)
    _touched: dict[str, QueuedTask | None] = field(default_factory=dict, init=False, repr=False, compare=False)
    # The fleet kept between cycles (`snapshot`), and the leases and nodes touched since it was last
    # brought up to date (ids; what the kept snapshot holds for them is looked up in it).
    _fleet: KeptSnapshot | None = field(default=None, init=False, repr=False, compare=False)
    _promises: KeptPromises | None = field(default=None, init=False, repr=False, compare=False)
    _leases_touched: dict[str, None] = field(default_factory=dict, init=False, repr=False, compare=False)
    _nodes_touched: dict[str, None] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        leases, self.leases = self.leases, {}
        for lease in leases.values():
            self._keep_lease(lease)
        for task in list(self.tasks.values()):
            self._keep_task(task)

    # -- what the folds read ----------------------------------------------------------------------

    def book(self, tasks: Mapping[str, TaskRecord] | None = None,
             leases: Mapping[str, LeaseRecord] | None = None) -> LeaseBook:
        """A read view for a fold, with records loaded for this batch (final tasks, ended leases) on top."""
        return LeaseBook(
            leases=ChainMap(dict(leases), self.leases) if leases else self.leases,
            tasks=ChainMap(dict(tasks), self.tasks) if tasks else self.tasks,
            nodes=self.nodes, accounts=self.accounts,
            active_by_task=self.by_task, active_by_node=self.by_node,
        )

    def snapshot(self, now: float) -> KeptSnapshot:
        """The fleet for `plan()` at `now`: equal to `build_snapshot` over the working set, kept between
        cycles — the leases and nodes touched since the last call taken out as it held them and put back
        as they are now; the quotas from each account's promised GPU-seconds, kept the same way
        (`KeptPromises`: the touched leases' promises put anew, the sums worked out for `now`)."""
        if self._fleet is None or self._promises is None:
            self._fleet = KeptSnapshot.of(build_snapshot(self.nodes.values(), self.leases.values(), self.tasks,
                                                         self.accounts.values(), now))
            self._promises = KeptPromises.of((lease, self.tasks[lease.task_id]) for lease in self.leases.values())
            self._promises.quotas(self.accounts.values(), now)  # counts each account once, for the next cycles
        else:
            fleet = self._fleet
            removed, added = self._leases_changed(fleet)
            nodes, removed_nodes = self._nodes_changed(fleet)
            self._fleet = fleet.changed(nodes, added, removed, removed_nodes, self._quotas(self._promises, now))
        self._leases_touched.clear()
        self._nodes_touched.clear()
        return self._fleet

    def _quotas(self, promises: KeptPromises, now: float) -> dict[str, QuotaAccount]:
        """The accounts at `now`, the touched leases' promises put in as they are now (None: ended)."""
        for lease_id in self._leases_touched:
            lease = self.leases.get(lease_id)
            promises.put(lease_id, None if lease is None else promise_of(lease, self.tasks[lease.task_id]))
        return promises.quotas(self.accounts.values(), now)

    def _leases_changed(self, fleet: KeptSnapshot) -> tuple[list[str], list[RunningLease]]:
        """The touched leases the kept snapshot holds otherwise than they run now (ids), and as they run now."""
        removed, added = [], []
        for lease_id in self._leases_touched:
            lease = self.leases.get(lease_id)
            now_running = running_lease(lease, self.tasks[lease.task_id]) if lease is not None and runs(lease) else None
            held = fleet.running(lease_id)
            if held == now_running:
                continue
            if held is not None:
                removed.append(lease_id)
            if now_running is not None:
                added.append(now_running)
        return removed, added

    def _nodes_changed(self, fleet: KeptSnapshot) -> tuple[list[Node], list[str]]:
        """The touched nodes as `plan()` sees them now where the kept snapshot holds them otherwise, and the
        ids of those it holds that no longer take leases."""
        nodes, removed = [], []
        for node_id in self._nodes_touched:
            record, held = self.nodes.get(node_id), fleet.node(node_id)
            if record is None or not record.takes_leases:
                if held is not None:
                    removed.append(node_id)
                continue
            node = fleet_node(record, [self.leases[lease_id] for lease_id in self.by_node.get(node_id, ())], self.tasks)
            if node != held:
                nodes.append(node)
        return nodes, removed

    def flags_of(self, task_id: str) -> frozenset[str]:
        task = self.tasks.get(task_id)
        return task.flags if task is not None else frozenset()

    def plan_queue(self) -> list[QueuedTask]:
        """The queue for `plan()`, minus tasks whose preemption victims are still checkpointing (they
        sit cycles out, so no second set of victims is chosen for them)."""
        awaiting = set(self.preempted_for.values())
        if not awaiting:
            return list(self.queue.values())
        return [task for task_id, task in self.queue.items() if task_id not in awaiting]

    def kept_queue(self, policy: Policy) -> OrderedQueue:
        """`plan_queue()` as an `OrderedQueue` for the policy's order, kept between cycles: brought up to
        date from the tasks touched since (sorted afresh only the first time or for another order)."""
        if self._kept is None or not self._kept.orders_like(policy):
            self._kept = OrderedQueue.of(self.queue.values(), policy)
        elif self._touched:
            removed = [task for task in self._touched.values() if task is not None]
            added = [self.queue[task_id] for task_id in self._touched if task_id in self.queue]
            self._kept = self._kept.changed(added, removed)
        self._touched.clear()
        awaiting = [self.queue[task_id] for task_id in set(self.preempted_for.values()) if task_id in self.queue]
        return self._kept.changed(removed=awaiting) if awaiting else self._kept

    # -- what a decided step changes ---------------------------------------------------------------

    def apply(self, changes: BookChanges, accounts: Mapping[str, QuotaRecord] | None = None) -> None:
        """Take over what a step decided to write (and the renewals it keeps in memory only): at the end of its
        decide phase, before its commit (`context` module docstring; a step that does not commit drops the set)."""
        for lease in [*changes.leases.values(), *changes.quiet_leases.values()]:
            self._keep_lease(lease)
        for task in changes.tasks.values():
            self._keep_task(task)
        for lease in changes.leases.values():
            if not lease.active and lease.task_id in self.tasks:
                self._keep_task(self.tasks[lease.task_id])  # its last lease ended: a final task may leave now
        self.nodes.update(changes.nodes)
        self._nodes_touched.update(dict.fromkeys(changes.nodes))
        self.accounts.update(accounts or {})

    def _keep_lease(self, lease: LeaseRecord) -> None:
        lease_id = lease.lease_id
        self._touch_lease(self.leases.get(lease_id))
        self._touch_lease(lease)
        if lease.active:
            self.leases[lease_id] = lease
            self.by_task.setdefault(lease.task_id, set()).add(lease_id)
            self.by_node.setdefault(lease.node_id, set()).add(lease_id)
            if lease.preempting and lease.preempted_for:
                self.preempted_for[lease_id] = lease.preempted_for
            return
        self.leases.pop(lease_id, None)
        self.preempted_for.pop(lease_id, None)
        for index, key in ((self.by_task, lease.task_id), (self.by_node, lease.node_id)):
            ids = index.get(key)
            if ids is not None:
                ids.discard(lease_id)
                if not ids:
                    del index[key]

    def _touch_lease(self, lease: LeaseRecord | None) -> None:
        """Note that the lease, and the node it is on, may look otherwise to `snapshot` now."""
        if lease is not None:
            self._leases_touched[lease.lease_id] = None
            self._nodes_touched[lease.node_id] = None

    def _keep_task(self, task: TaskRecord) -> None:
        task_id = task.task_id
        for lease_id in self.by_task.get(task_id, ()):
            self._touch_lease(self.leases[lease_id])  # its running leases and their nodes carry its facets
        if task.state.is_terminal and task_id not in self.by_task:
            self.tasks.pop(task_id, None)
        else:
            self.tasks[task_id] = task
        if task_id not in self._touched:
            self._touched[task_id] = self.queue.get(task_id)
        if task.in_queue:
            self.queue[task_id] = task.queued_task()
        else:
            self.queue.pop(task_id, None)
        if task.in_queue and task.approved_by is not None:
            self.approved.add(task_id)
        else:
            self.approved.discard(task_id)
