"""Why openb's grid cells keep ~47% of the fleet busy while ready work waits, for every policy alike.

`utilisation_when_queued` counts, over the time at least one task whose data is ready is queued, the share of
the fleet doing useful work. On openb (every pod of gpuspec33 arriving within 0.1 h on the trace's own node list)
cardflow and easy-backfill score the same, so the idle GPUs are not a choice either makes. This script replays a
grid unit with the engine's queue samples extended: at every sample where ready work waits, it records the fleet's
free GPUs split by whether some waiting task could use them — a free GPU is *usable* when its node's card type is
one of a waiting task's options and the node has at least that task's GPU count free. Printed per policy: the
window's busy-while-queued share, and the idle GPU-time while queued split into usable and unusable, the latter by
card type and why: no waiting task takes that card type, or its node has fewer free GPUs than any waiting task
that takes it asks for.

    nice -n 5 .venv/bin/python bench/openb_idle_queued.py [--seed 1] [--delay 0 0.25]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import policies_grid as grid  # noqa: E402
from policies import grid_scenario  # noqa: E402
from shared.scheduling.model import Node, QueuedTask  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.simulation.engine import Simulation  # noqa: E402
from shared.simulation.metrics import busy_while_queued, window  # noqa: E402


class IdleWhileQueued(Simulation):
    """The engine, each instant's free GPUs while ready work waits split by whether a waiting task could use them."""

    def __init__(self, *args, lo: float, hi: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lo, self.hi = lo, hi
        self.samples: list[tuple[float, int, Counter[str], Counter[str]]] = []  # (t, busy, usable, unusable by card)
        self.waiting: Counter[str] = Counter()  # GPU-seconds waited by ready tasks inside the window, by card types
        self._waiting_now: Counter[str] = Counter()
        self._last = lo

    def _sample(self, now: float) -> None:
        super()._sample(now)
        span = max(0.0, min(now, self.hi) - max(self._last, self.lo))
        for cards, gpus in self._waiting_now.items():
            self.waiting[cards] += gpus * span
        self._last, self._waiting_now = now, Counter()
        for task in self._queue.values():
            if task.data_ready:
                self._waiting_now["/".join(sorted({option.card_type for option in task.options}))] += task.gpus
        if self._ready_queued == 0:
            self.samples.append((now, self.fleet.busy_gpus, Counter(), Counter()))
            return
        usable, unusable = free_split(self.fleet.nodes(), [task for task in self._queue.values() if task.data_ready])
        self.samples.append((now, self.fleet.busy_gpus, usable, unusable))


def free_split(nodes: Sequence[Node], waiting: Sequence[QueuedTask]) -> tuple[Counter[str], Counter[str]]:
    """The nodes' free GPUs that some waiting task could use (`usable`: the node's card type is one of its options
    and the node has that task's GPU count free), and the others by card type and why not."""
    wants: dict[str, int] = {}  # card type -> the fewest GPUs a waiting task asks of it
    for task in waiting:
        for option in task.options:
            wants[option.card_type] = min(wants.get(option.card_type, task.gpus), task.gpus)
    usable, unusable = Counter(), Counter()
    for node in nodes:
        free = len(node.free)
        if not free:
            continue
        if node.card_type not in wants:
            unusable[f"{node.card_type} (no waiting task takes it)"] += free
        elif free < wants[node.card_type]:
            unusable[f"{node.card_type} (too few free on the node)"] += free
        else:
            usable["usable"] += free
    return usable, unusable


def idle_split(simulation: IdleWhileQueued) -> tuple[float, float, Counter[str]]:
    """GPU-seconds inside the window while ready work waited: idle and usable, idle and unusable (by card type)."""
    usable, unusable_total, unusable = 0.0, 0.0, Counter()
    samples = simulation.samples
    for (t, _, use, unuse), (t_next, *_rest) in zip(samples, samples[1:], strict=False):
        span = max(0.0, min(t_next, simulation.hi) - max(t, simulation.lo))
        if span <= 0 or not (use or unuse):
            continue
        usable += use["usable"] * span
        for card, gpus in unuse.items():
            unusable[card] += gpus * span
            unusable_total += gpus * span
    return usable, unusable_total, unusable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--delay", type=float, nargs="*", default=[0.0, 0.25])
    parser.add_argument("--policies", nargs="*", default=["easy-backfill", "cardflow"])
    args = parser.parse_args()
    console = Console(width=220)
    table = Table(title="openb: idle GPU-time while ready work waits")
    for column in ("delay", "policy", "busy while queued", "idle while queued, GPU-h", "of it usable by a waiting task",
                   "unusable, top card types (GPU-h)", "waiting ready work by its card types (GPU-h)"):
        table.add_column(column)
    for delay in args.delay:
        cell = grid.Cell(0.8, delay, 0.6, "default")
        for name in args.policies:
            scenario = grid_scenario(grid.Run(cell, grid.OPENB, args.seed, POLICIES[name]))
            lo, hi = window(scenario.tasks)
            simulation = IdleWhileQueued(scenario.tasks, scenario.cluster, POLICIES[name], lo=lo, hi=hi,
                                        card_model=scenario.card_model, quotas=scenario.quotas)
            outcome = simulation.run()
            result_busy, offered = busy_while_queued(outcome.recorder, scenario.cluster.capacity, lo, hi)
            usable, unusable_total, unusable = idle_split(simulation)
            idle = usable + unusable_total
            top = ", ".join(f"{card} {gpu_s / 3600:,.0f}" for card, gpu_s in unusable.most_common(5))
            waiting = ", ".join(f"{cards} {gpu_s / 3600:,.0f}" for cards, gpu_s in simulation.waiting.most_common(4))
            table.add_row(f"{delay:g}", name, f"{result_busy / offered:.1%}", f"{idle / 3600:,.0f}",
                          f"{usable / idle:.1%}" if idle else "-", top, waiting)
    console.print(table)


if __name__ == "__main__":
    main()
