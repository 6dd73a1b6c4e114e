"""`cardflow up` and its demo: supervised service/agent/console processes, a demo workload, a live view.

- `supervisor`: start, restart (with back-off) and stop child processes without orphans;
- `system`: which processes make a running cardflow, and the `cardflow up` system part;
- `workload`: the demo's fleet and tasks (pure data), `upstream`: submit them like an upstream system;
- `tail`, `board`, `render`, `runner`: follow `cf:events`, fold them, draw the live view and summary.
"""
