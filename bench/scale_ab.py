"""Two checkouts' `plan()` side by side in one process, on the headline's cold plan and steady cycles (issue 10
item 3).

Run: `.venv/bin/python bench/scale_ab.py BEFORE_CHECKOUT AFTER_CHECKOUT [ROUNDS]`. Each checkout's own
`bench/scale.py` builds its own inputs (so each plans over objects laid out as its bench lays them out):
the headline fleet and queue, the first plan over kept inputs (the queue as an `OrderedQueue`, the fleet as a
`KeptSnapshot` where the checkout has one: what `bench/scale.py --headline --json`'s `ms` times), then 6 steady
cycles (`next_cycle`); the 5th (index 4: a GPU stays free to the end, every task walked) and the 6th (no GPU left
free) are kept, and so is the headline's plan over the list and the plain snapshot (`list_ms`).
Then ROUNDS rounds (default 9) time one `plan()` of each checkout on each of the four, alternating
which checkout goes first; it prints the load, and per checkout and cycle the best, the median and every
time (CPU time of the process). Load shifts hit both checkouts alike, unlike runs made one after the other.
`--variants [NAME ...]` times instead the first plan over kept inputs of each variant of the headline
(`bench/scale_variants.py`: its `VARIANTS`, or those named), applied to each checkout's own headline inputs.
"""

from __future__ import annotations

import importlib
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.scale_variants import VARIANTS  # noqa: E402  (applied to each checkout's own tasks)

FULL_WALK, NO_FREE, FIRST, LISTED = 4, 5, "first", "list"
LABELS = {FULL_WALK: "full walk", NO_FREE: "no GPU free", FIRST: "first plan", LISTED: "list plan"}
CYCLES = (FIRST, FULL_WALK, NO_FREE, LISTED)


def load(checkout: str, variants: tuple = ()) -> tuple:
    """The checkout's plan function, the cardflow policy and its steady cycles' inputs, by its own code — or, given
    `variants`, each variant's first-plan inputs (kept), by its own code."""
    for name in [name for name in sys.modules if name == "shared" or name.startswith(("shared.", "bench"))]:
        del sys.modules[name]
    sys.path.insert(0, checkout)
    try:
        scale = importlib.import_module("bench.scale")
        ordered_queue = importlib.import_module("shared.scheduling.ordered_queue")
    finally:
        sys.path.remove(checkout)
    snapshot, queue = scale.headline_inputs()
    policy, rng, now = scale.POLICIES["cardflow"], random.Random("steady"), scale.NOW
    if variants:
        kept_snapshot = scale.KeptSnapshot.of(snapshot)
        return scale.plan, policy, {variant.name: (kept_snapshot, ordered_queue.OrderedQueue.of(variant.queue(queue), policy),
                                                   now) for variant in variants}
    cycles = {LISTED: (snapshot, queue, now)}
    kept = ordered_queue.OrderedQueue.of(queue, policy)
    if hasattr(scale, "KeptSnapshot"):  # a checkout that keeps the snapshot between cycles plans over a kept one
        snapshot = scale.KeptSnapshot.of(snapshot)
    cycles[FIRST] = (snapshot, kept, now)
    decided = scale.plan(snapshot, kept, policy, now)
    for cycle in range(NO_FREE + 1):
        snapshot, kept, now, _ = scale.next_cycle(snapshot, kept, decided, now, cycle, rng)
        decided = scale.plan(snapshot, kept, policy, now)
        cycles[cycle] = (snapshot, kept, now)
    return scale.plan, policy, cycles


def main() -> None:
    arguments, named = sys.argv[1:], None
    if "--variants" in arguments:
        at = arguments.index("--variants")
        arguments, named = arguments[:at], arguments[at + 1:]
    checkouts, rounds = arguments[:2], int(arguments[2]) if len(arguments) > 2 else 9
    variants = () if named is None else tuple(variant for variant in VARIANTS if not named or variant.name in named)
    cycles_timed = CYCLES if named is None else tuple(variant.name for variant in variants)
    loaded = [(checkout, *load(checkout, variants)) for checkout in checkouts]
    times: dict[tuple[str, int | str], list[float]] = {(checkout, cycle): [] for checkout in checkouts
                                                       for cycle in cycles_timed}
    for index in range(rounds):
        for checkout, plan, policy, cycles in (loaded if index % 2 == 0 else loaded[::-1]):
            for cycle in cycles_timed:
                snapshot, kept, now = cycles[cycle]
                started = time.process_time()
                plan(snapshot, kept, policy, now)
                times[(checkout, cycle)].append((time.process_time() - started) * 1000)
    print("1-minute load average", round(os.getloadavg()[0], 1))
    for (checkout, cycle), millis in times.items():
        millis.sort()
        print(f"{checkout}  {LABELS.get(cycle, cycle):11s} best {millis[0]:6.1f}  median {millis[len(millis) // 2]:6.1f} ms  "
              f"{[round(value) for value in millis]}")


if __name__ == "__main__":
    main()
