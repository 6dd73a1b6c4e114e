"""Assemble an agent from its options: hardware (sim / NVML / fake), runner, daemon.

`cardflow agent` and the tests both go through `build_daemon`, so what the tests run is what
the command runs.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from shared.cards import load_catalog

from services.agent.daemon import AgentConfig, AgentDaemon
from services.agent.hardware import (
    HardwareSpecError,
    NodeHardware,
    fake_hardware,
    nvml_hardware,
    nvml_meter,
    simulated_hardware,
)
from services.agent.process_runner import ProcessRunner
from services.agent.runner import Runner, RunSink
from services.agent.sim_runner import SimRunner


@dataclass(frozen=True)
class AgentOptions:
    """Everything `cardflow agent` accepts (see docs/agent.md)."""

    agent_id: str
    sim: str | None = None  # e.g. "H100x8"; None = real mode
    time_scale: float = 1.0
    node_id: str | None = None
    heartbeat_s: float = 2.0
    register_every_s: float = 30.0
    progress_step: float | None = 0.1
    checkpoint_root: Path | None = None
    log_dir: Path | None = None
    grace_s: float | None = None
    fake_gpus: int | None = None
    card_type: str | None = None
    catalog: Path | None = None
    data_dir: Path = Path(".cardflow")

    def validate(self) -> None:
        if self.time_scale <= 0:
            raise HardwareSpecError("--time-scale must be > 0")
        if self.heartbeat_s <= 0 or self.register_every_s <= 0:
            raise HardwareSpecError("--heartbeat and --register-every must be > 0")
        if self.sim is not None and self.fake_gpus is not None:
            raise HardwareSpecError("--fake-gpus belongs to --real mode, not --sim")
        if self.fake_gpus is not None and not self.card_type:
            raise HardwareSpecError("--fake-gpus needs --card-type")

    @property
    def agent_dir(self) -> Path:
        return self.data_dir / "agent" / self.agent_id


def discover_hardware(options: AgentOptions) -> NodeHardware:
    """The node's GPUs for these options (raises `NoGpusError` / `HardwareSpecError` with a reason)."""
    catalog = load_catalog(options.catalog)
    if options.sim is not None:
        return simulated_hardware(options.sim, catalog)
    if options.fake_gpus is not None:
        return fake_hardware(options.fake_gpus, options.card_type or "", catalog)
    return nvml_hardware(options.card_type, catalog)


def build_daemon(options: AgentOptions, redis_url: str, hardware: NodeHardware | None = None) -> AgentDaemon:
    """A ready-to-run daemon (call `await daemon.run(stop)`)."""
    options.validate()
    hardware = hardware or discover_hardware(options)
    config = AgentConfig(
        agent_id=options.agent_id,
        node_id=options.node_id or (options.agent_id if options.sim else socket.gethostname()),
        redis_url=redis_url,
        heartbeat_s=options.heartbeat_s,
        register_every_s=options.register_every_s,
        shutdown_grace_s=options.grace_s if options.grace_s is not None else 30.0,
        time_scale=options.time_scale if options.sim is not None else 1.0,
    )
    return AgentDaemon(config, hardware, lambda sink: _runner(options, hardware, sink))


def _runner(options: AgentOptions, hardware: NodeHardware, sink: RunSink) -> Runner:
    if options.sim is not None:
        return SimRunner(hardware, sink, options.time_scale, progress_step=options.progress_step)
    return ProcessRunner(
        hardware,
        sink,
        options.checkpoint_root or options.agent_dir / "checkpoints",
        options.log_dir or options.agent_dir / "logs",
        grace_s=options.grace_s,
        meter=None if options.fake_gpus is not None else nvml_meter(),
    )


async def run_until_signalled(daemon: AgentDaemon) -> None:
    """Run the daemon until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await daemon.run(stop)
