"""`bench/pipeline.py --pg-stats`: the embedded PostgreSQL's CPU in one phase, by the process it served.

`pg_stat_statements` times are wall time in the executor; on a machine whose cores are all busy they
also count waiting for a core, several times the CPU at 250 tasks/s (docs/BENCHMARKS.md, Pipeline
session 10). This counts CPU instead, with no help from the server: `snapshot` reads the user + system
time of every process under the postmaster and names each backend by its client, the bench process
whose TCP socket is at the other end of the backend's connection (`psutil`); other server processes
go by their title (`walwriter`, `autovacuum worker`, ...), and those that ended in between (e.g. an
autovacuum worker) by the postmaster's reaped children. `cpu_by_client` takes the difference of two
snapshots (pure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psutil

ENDED = "(ended processes)"
"""CPU of server processes that exited between the snapshots (the postmaster's reaped children)."""
UNKNOWN_CLIENT = "(other clients)"
"""A backend whose client is none of the named processes (the bench's own connections)."""


@dataclass(frozen=True)
class ServerCpu:
    """One moment: CPU seconds of each live server process (pid -> (name, seconds)) and of those that ended."""

    processes: dict[int, tuple[str, float]]
    ended_s: float


def cpu_by_client(before: ServerCpu, after: ServerCpu) -> dict[str, float]:
    """CPU seconds each name used between two snapshots, largest first (pure). A process born in between
    counts from zero; one that ended in between is in `ENDED` (its last part included)."""
    used: dict[str, float] = {ENDED: max(after.ended_s - before.ended_s, 0.0)}
    for pid, (name, seconds) in after.processes.items():
        _, earlier = before.processes.get(pid, (name, 0.0))
        used[name] = used.get(name, 0.0) + max(seconds - earlier, 0.0)
    return dict(sorted(((name, s) for name, s in used.items() if s > 0), key=lambda item: -item[1]))


def snapshot(postmaster_pid: int, clients: Mapping[str, int]) -> ServerCpu:
    """CPU so far of every process under the postmaster, each backend named by its client (see the module)."""
    by_port = _client_ports(clients)
    postmaster = psutil.Process(postmaster_pid)
    processes: dict[int, tuple[str, float]] = {}
    for child in postmaster.children():
        try:
            times = child.cpu_times()
            processes[child.pid] = (_name_of(child, by_port), times.user + times.system)
        except psutil.Error:
            continue  # ended meanwhile: counted with the reaped children next time
    times = postmaster.cpu_times()
    processes[postmaster_pid] = ("postmaster", times.user + times.system)
    return ServerCpu(processes, times.children_user + times.children_system)


def _client_ports(clients: Mapping[str, int]) -> dict[int, str]:
    """Local TCP port -> the name of the client process (or its child) that holds it; the first name given
    wins, so a process named by itself goes before the parent that spawned it (the bench spawns the services)."""
    ports: dict[int, str] = {}
    for name, pid in clients.items():
        try:
            process = psutil.Process(pid)
            members = [process, *process.children(recursive=True)]
        except psutil.Error:
            continue
        for member in members:
            try:
                for connection in member.net_connections(kind="tcp"):
                    ports.setdefault(connection.laddr.port, name)  # a named child before the parent that spawned it
            except psutil.Error:
                continue
    return ports


def _name_of(process: psutil.Process, by_port: Mapping[int, str]) -> str:
    connections = [c for c in process.net_connections(kind="tcp") if c.raddr]
    if connections:
        return by_port.get(connections[0].raddr.port, UNKNOWN_CLIENT)
    title = " ".join(process.cmdline()).removeprefix("postgres: ")
    return " ".join(title.split()[:2]) or process.name()
