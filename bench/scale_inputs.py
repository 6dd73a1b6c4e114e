"""The scale benchmark's inputs: its constants, the synthetic seeded fleet and queue (the headline's among them), and
the same inputs kept as a leader keeps them (`kept_inputs`).

The workload: four card types, ~90% of GPUs leased (a tenth of those leases opportunistic), tasks of 1-8 GPUs (a few
of 16) over one to three card types, a class mix of 20% core, 50% standard, 30% opportunistic, 10% with data not yet
ready, quotas on a few projects; 80% of queued tasks checkpoint every 30 minutes (the simulator's synthesis default),
so the preset's standard fillers (`checkpointing_standard_borrows`) take part. Until session 22b no task set a
checkpoint interval and no standard task was ever a filler here (the docs' earlier headline numbers are of that).
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.scheduling.kept_snapshot import KeptSnapshot  # noqa: E402
from shared.scheduling.model import CardOption, Node, PriorityClass, QueuedTask, QuotaAccount, RunningLease, Snapshot  # noqa: E402
from shared.scheduling.ordered_queue import OrderedQueue  # noqa: E402

NOW = 1_700_000_000.0
CARDS = ("H100", "A100-80G", "L40S", "A10")
CARD_SHARE = (0.3, 0.3, 0.2, 0.2)
SPEED = {"H100": 1.0, "A100-80G": 2.2, "L40S": 2.6, "A10": 5.0}  # runtime multiple vs H100
PRICE = {"H100": 12.0, "A100-80G": 5.1, "L40S": 2.6, "A10": 1.0}
GPUS_PER_NODE = 8
BUSY_SHARE = 0.9
TARGET_MS = 200.0
HEADLINE = (10_000, 100_000)
NODE_SERIES = (1_000, 2_500, 5_000, 10_000)
QUEUE_SERIES = (10_000, 25_000, 50_000, 100_000)
# Steady cycles: between two plans the previous plan's grants start, CHURN running leases end and CHURN
# tasks arrive, CYCLE_S seconds later; the queue is kept sorted between cycles (`OrderedQueue`).
CHURN = 100
CYCLE_S = 30.0
WARM_CYCLES, TIMED_CYCLES = 4, 5
# Queued tasks that checkpoint, and how often: the simulator's synthesis defaults (`SynthesisParams`).
CHECKPOINT_SHARE = 0.8
CHECKPOINT_INTERVAL_S = 1800.0
# CPU time of this process: on an idle machine it equals wall time; on a shared one (CI, this
# 2-core box running other work) it does not count the time other processes had the CPU.
CLOCK = time.process_time


@dataclass(frozen=True)
class Case:
    nodes: int
    queue: int
    policy: str = "cardflow"


def build_snapshot(nodes: int, rng: random.Random) -> Snapshot:
    """A fleet of `nodes` 8-GPU nodes, ~90% of its GPUs held by running leases."""
    built, leases = [], []
    for index in range(nodes):
        card = rng.choices(CARDS, CARD_SHARE)[0]
        busy = sum(rng.random() < BUSY_SHARE for _ in range(GPUS_PER_NODE))
        node_id = f"node-{index:05d}"
        start = 0
        while start < busy:
            size = min(busy - start, rng.choice((1, 2, 4, 8)))
            cls = PriorityClass.OPPORTUNISTIC if rng.random() < 0.1 else PriorityClass.STANDARD
            started = NOW - rng.uniform(60, 20 * 3600)
            leases.append(RunningLease(
                lease_id=f"lease-{index}-{start}", task_id=f"run-{index}-{start}", project=f"p{index % 40}",
                priority_class=cls, node_id=node_id, card_type=card, gpu_indices=tuple(range(start, start + size)),
                started_at=started, estimated_end=NOW + rng.uniform(60, 12 * 3600),
                last_checkpoint_at=started + rng.uniform(0, NOW - started) if rng.random() < 0.7 else None,
            ))
            start += size
        built.append(Node(node_id, card, GPUS_PER_NODE, frozenset(range(busy, GPUS_PER_NODE))))
    quotas = {f"p{i}": QuotaAccount(f"p{i}", rng.uniform(10, 5000), NOW - 86400, NOW + rng.uniform(3600, 30 * 86400))
              for i in range(0, 40, 4)}
    return Snapshot(nodes=tuple(built), leases=tuple(leases), quotas=quotas)


def build_queue(size: int, rng: random.Random, now: float = NOW, prefix: str = "task", first: int = 0,
                waited_s: float = 7 * 86400, checkpoint_share: float = CHECKPOINT_SHARE) -> list[QueuedTask]:
    """`size` waiting tasks with a realistic mix of classes, sizes and card options, submitted within
    `waited_s` before `now`; `checkpoint_share` of them checkpoint every CHECKPOINT_INTERVAL_S. Whether a task
    checkpoints is drawn from an rng of its own (seeded by `prefix`), so every other field is drawn as it was
    before tasks checkpointed, and `checkpoint_share=0` gives that earlier workload."""
    classes = (PriorityClass.CORE, PriorityClass.STANDARD, PriorityClass.OPPORTUNISTIC)
    checkpoints = random.Random(f"checkpoints-{prefix}")
    queue = []
    for index in range(first, first + size):
        gpus = rng.choices((1, 2, 4, 8, 16), (40, 25, 18, 15, 2))[0]
        base = rng.uniform(300, 24 * 3600)
        cards = sorted(rng.sample(CARDS, rng.randint(1, 3)), key=lambda card: PRICE[card] * SPEED[card])
        options = tuple(CardOption(card, base * SPEED[card], base * SPEED[card] * gpus * PRICE[card] / 3600)
                        for card in cards)
        queue.append(QueuedTask(
            task_id=f"{prefix}-{index:06d}", project=f"p{rng.randrange(40)}",
            priority_class=rng.choices(classes, (20, 50, 30))[0], priority=rng.randint(0, 9), gpus=gpus,
            submitted_at=now - rng.uniform(0, waited_s), options=options,
            data_ready=rng.random() > 0.1, heavy=rng.random() < 0.1,
            checkpoint_interval_s=CHECKPOINT_INTERVAL_S if checkpoints.random() < checkpoint_share else None,
        ))
    return queue


def inputs_of(nodes: int, queued: int) -> tuple[Snapshot, list[QueuedTask]]:
    """The fleet depends only on its size; a shorter queue is a prefix of a longer one."""
    return build_snapshot(nodes, random.Random(f"fleet-{nodes}")), build_queue(queued, random.Random("queue"))


def headline_inputs() -> tuple[Snapshot, list[QueuedTask]]:
    return inputs_of(*HEADLINE)


def kept_inputs(snapshot: Snapshot, queue: list[QueuedTask], policy) -> tuple[OrderedQueue, KeptSnapshot]:
    """The inputs as a leader keeps them: the queue sorted for the policy, the fleet with its layout and lease index."""
    return OrderedQueue.of(queue, policy), KeptSnapshot.of(snapshot)

