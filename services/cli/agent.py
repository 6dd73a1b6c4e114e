"""`cardflow agent`: run a GPU-host agent (simulated GPUs with --sim, real ones with --real)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("agent")
    def agent(
        agent_id: str = typer.Option(..., "--id", help="this agent's id; its inbox is cf:agent:<id>"),
        sim: str = typer.Option(None, "--sim", help="simulate GPUs: CARDxN, e.g. H100x8 (card type from the catalog)"),
        real: bool = typer.Option(False, "--real", help="run tasks as subprocesses on this node's GPUs (NVML)"),
        time_scale: float = typer.Option(1.0, "--time-scale", help="sim: a task of R seconds runs R / X real seconds"),
        node_id: str = typer.Option(None, "--node-id", help="node id to register (default: agent id in sim, hostname in real)"),
        heartbeat: float = typer.Option(2.0, "--heartbeat", help="seconds between heartbeats"),
        register_every: float = typer.Option(30.0, "--register-every", help="seconds between re-registrations"),
        progress_step: float = typer.Option(0.1, "--progress-step", help="sim: report progress every this share (0 = never)"),
        checkpoint_root: Path = typer.Option(None, "--checkpoint-root", help="real: parent of each task's CARDFLOW_CHECKPOINT_DIR"),
        log_dir: Path = typer.Option(None, "--log-dir", help="real: where each run's stdout/stderr log goes"),
        grace: float = typer.Option(None, "--grace", help="seconds from SIGTERM to SIGKILL (default: the command's)"),
        fake_gpus: int = typer.Option(None, "--fake-gpus", help="real, TESTING AID: pretend N GPUs exist (needs --card-type)"),
        card_type: str = typer.Option(None, "--card-type", help="real: card type to register (default: from NVML's name)"),
        catalog: Path = typer.Option(None, "--catalog", help="card catalog YAML (default: the packaged one)"),
    ) -> None:
        """Run a GPU-host agent until SIGINT/SIGTERM (connects to CARDFLOW_REDIS_URL)."""
        from services.agent.build import AgentOptions, build_daemon, run_until_signalled
        from services.agent.hardware import HardwareSpecError, NoGpusError
        from shared.logging import configure_logging, get_logger
        from shared.settings import get_settings

        configure_logging()
        if (sim is None) == (not real):
            raise typer.BadParameter("choose exactly one of --sim CARDxN or --real")
        settings = get_settings()
        if not settings.redis_url:
            raise typer.BadParameter("CARDFLOW_REDIS_URL is not set (see `cardflow endpoints`)")
        options = AgentOptions(
            agent_id=agent_id, sim=sim, time_scale=time_scale, node_id=node_id, heartbeat_s=heartbeat,
            register_every_s=register_every, progress_step=progress_step or None, checkpoint_root=checkpoint_root,
            log_dir=log_dir, grace_s=grace, fake_gpus=fake_gpus, card_type=card_type, catalog=catalog,
            data_dir=settings.data_dir,
        )
        try:
            daemon = build_daemon(options, settings.redis_url)
        except (NoGpusError, HardwareSpecError) as exc:
            get_logger(__name__).error("agent cannot start", error=str(exc))
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        if settings.metrics_port is not None:
            from services.observability.metrics import serve_metrics

            serve_metrics(settings.metrics_port)  # the agent's own gauges (services/agent/metrics.py)
        from services.common.process_gc import settle_after_start_up

        settle_after_start_up()  # long-running, like a service: freeze start-up objects, collect less often
        asyncio.run(run_until_signalled(daemon))
