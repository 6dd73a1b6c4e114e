"""Discrete-event simulation of a GPU fleet driven by real or synthetic traces.

The simulator replays a workload (`Trace`) on a `Cluster` under one or more scheduling policies.
Every decision is made by the same pure `shared.scheduling.plan.plan()` the live dispatcher runs;
this package only moves simulated time forward, applies the plan's grants and preemptions, and
measures what happened (`metrics`). Importers for trace formats live in `traces/`.
"""
