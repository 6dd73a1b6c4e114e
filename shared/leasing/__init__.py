"""The dispatcher's pure rules, next to the scheduling core: no I/O, no clock, no randomness.

- `fencing`: may this agent report about this lease?
- `lease_end`: what the end of a lease does to its task (shared with the simulator);
- `lease_end_events`: the events that tell a lease's end;
- `waiting`: what a deferral does to a waiting task, and which events say so;
- `snapshot`: `plan()`'s inputs built from the dispatcher's rows.

The dispatcher service (`services/dispatcher`) only loads, folds with these rules and saves.
"""
