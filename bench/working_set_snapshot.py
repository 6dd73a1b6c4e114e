"""The dispatcher's snapshot per cycle: kept (`WorkingSet.snapshot`) against built afresh (`build_snapshot`).

Run: `.venv/bin/python bench/working_set_snapshot.py [NODES] [ROUNDS] [gc-off]` (default 10,000 nodes of 8 GPUs,
9 rounds; `gc-off` pauses the cyclic garbage collector for the whole run, whose passes over the large heap
otherwise land on either side at random). The working set holds 3 leases of 2 GPUs per node (30,000 leases, each its own task) and 4 quota
accounts. Each round commits 100 lease ends, 100 grants on the GPUs freed and 3,000 quiet renewals (what a
busy cycle's steps bring), then times, in alternating order, bringing the kept snapshot up to date and
building a plain one from the same records (CPU time of the process; the kept one's quotas from the promises
kept per account, `KeptPromises`, the plain one's counted over every lease). Prints the load, best and median.
"""

from __future__ import annotations

import os
import random
import gc
import statistics
import sys
import time
from dataclasses import replace
from operator import attrgetter
from datetime import UTC, datetime, timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from services.dispatcher.working_set import WorkingSet  # noqa: E402
from shared.events.reasons import ReleaseReason  # noqa: E402
from shared.leasing.records import LeaseState, QuotaRecord  # noqa: E402
from shared.leasing.snapshot import build_snapshot  # noqa: E402
from shared.leasing.work import BookChanges  # noqa: E402
from tests.unit.dispatcher.builders import NOW, a_lease_record, a_node_record, a_task_record  # noqa: E402


def a_working_set(nodes: int) -> WorkingSet:
    tasks, leases = {}, {}
    for n in range(nodes):
        for part in range(3):
            task_id, lease_id = f"T{n}-{part}", f"L{n}-{part}"
            tasks[task_id] = a_task_record(task_id, heavy=part == 0)
            leases[lease_id] = a_lease_record(lease_id, task_id, node_id=f"n{n:05d}", gpus=(2 * part, 2 * part + 1),
                                              estimated_end=NOW + timedelta(minutes=5 + (n * 3 + part) % 90))
    window = (NOW - timedelta(days=1), NOW + timedelta(days=30))
    accounts = {f"acct{i}": QuotaRecord(f"acct{i}", "proj-a", 1e6, None, *window) for i in range(4)}
    return WorkingSet(tasks=tasks, leases=leases, accounts=accounts,
                      nodes={f"n{n:05d}": a_node_record(f"n{n:05d}", gpus=8) for n in range(nodes)})


def a_busy_cycle(state: WorkingSet, rng: random.Random, serial: int) -> None:
    """100 leases end, 100 start on the GPUs they freed, 3,000 leases renew quietly."""
    ending = rng.sample(sorted(state.leases), 100)
    ended = {lease_id: replace(state.leases[lease_id], state=LeaseState.ENDED, ended_at=NOW,
                               end_reason=ReleaseReason.SUCCEEDED) for lease_id in ending}
    state.apply(BookChanges(leases=ended))
    started, tasks = {}, {}
    for i, lease in enumerate(ended.values()):
        task_id, lease_id = f"S{serial}-{i}", f"G{serial}-{i}"
        tasks[task_id] = a_task_record(task_id)
        started[lease_id] = a_lease_record(lease_id, task_id, node_id=lease.node_id, gpus=lease.gpu_indices)
    state.apply(BookChanges(tasks=tasks, leases=started))
    quiet = {lease_id: replace(state.leases[lease_id], renewals_unreported=serial)
             for lease_id in rng.sample(sorted(state.leases), 3000)}
    state.apply(BookChanges(quiet_leases=quiet))


def main(nodes: int = 10_000, rounds: int = 9, collector: str = "gc-on") -> None:
    if collector == "gc-off":
        gc.disable()
    state, rng, now = a_working_set(nodes), random.Random(7), NOW.timestamp()
    state.snapshot(now)
    kept_s, fresh_s = [], []
    for serial in range(rounds):
        a_busy_cycle(state, rng, serial)
        now += 1.0
        order = ((kept_s, lambda: state.snapshot(now)),
                 (fresh_s, lambda: build_snapshot(state.nodes.values(), state.leases.values(), state.tasks,
                                                  state.accounts.values(), now)))
        built = {}
        for times, build in order if serial % 2 else reversed(order):
            started = time.process_time()
            built[id(times)] = build()
            times.append((time.process_time() - started) * 1000)
        kept, fresh = built[id(kept_s)], built[id(fresh_s)]
        by_id = attrgetter("lease_id")
        assert sorted(kept.leases, key=by_id) == sorted(fresh.leases, key=by_id) and kept.quotas == fresh.quotas
    print(f"load {os.getloadavg()[0]:.1f}; {nodes} nodes, {len(state.leases)} leases, {rounds} rounds, {collector} "
          "(CPU ms)")
    for name, times in (("kept", kept_s), ("fresh", fresh_s)):
        print(f"{name:6} best {min(times):7.1f}  median {statistics.median(times):7.1f}  "
              f"all {' '.join(f'{t:.0f}' for t in times)}")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]), *sys.argv[3:4])
