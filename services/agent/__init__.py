"""The GPU-host agent daemon (`cardflow agent`): registers its GPUs, heartbeats, runs granted leases.

`state` is the pure lease state machine; `daemon` wires it to Redis (inbox commands in, reports
out) and to a runner: `sim_runner` (simulated GPUs) or `process_runner` (real subprocesses).
See services/agent/README.md and docs/agent.md.
"""
