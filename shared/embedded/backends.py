"""`Backends`: start the embedded servers a configuration lacks, hand out `Endpoints`, stop them all.

    with Backends(settings, data_dir) as endpoints:     # or: async with Backends(...)
        ...                                             # endpoints.as_env(), endpoints.settings()

A backend configured in `settings` (CARDFLOW_REDIS_URL, CARDFLOW_DATABASE_URL, CARDFLOW_S3_ENDPOINT)
is used as is; each missing one is started as a real server under `data_dir`. Start-up takes the
data dir's owner lock, stops the leftovers of a crashed run, spawns the servers (they boot
concurrently), waits until each answers, and records them in `run/state.json`. While they run, a
`ServerWatch` reaps and restarts any that dies (same ports, back-off, stale lock files removed;
`supervise=False` turns it off; `postgres_settings` adds `postgres -c` settings, e.g. a benchmark's
pg_stat_statements). `stop()` (also run at interpreter exit) stops the watch, then the
servers in reverse order, and removes the run files.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shared.embedded.credentials import load_or_create_credentials, write_private
from shared.embedded.endpoints import Endpoints
from shared.embedded.launch import Launched, LaunchOptions
from shared.embedded.postgres_server import launch_postgres
from shared.embedded.processes import EmbeddedServerError, ManagedProcess, wait_until_ready
from shared.embedded.redis_server import launch_redis
from shared.embedded.pg_users import roles_path
from shared.embedded.redis_users import users_path
from shared.embedded.s3_server import launch_s3
from shared.embedded.state import (
    Layout,
    OwnerLock,
    clean_leftovers,
    clear_state,
    is_instance_running,
    remove_weed_sockets,
    write_state,
)
from shared.embedded.watch import ServerWatch
from shared.logging import get_logger
from shared.settings import Settings

log = get_logger(__name__)


class Backends:
    """The backends of one cardflow instance: external ones from settings, embedded ones started here."""

    def __init__(
        self,
        settings: Settings | None = None,
        data_dir: Path | str | None = None,
        *,
        durable: bool = True,
        die_with_owner: bool = True,
        start_timeout: float = 90.0,
        supervise: bool = True,
        postgres_settings: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.layout = Layout.of(data_dir if data_dir is not None else self.settings.data_dir)
        self._durable = durable
        self._die_with_owner = die_with_owner
        self._start_timeout = start_timeout
        self._postgres_settings = postgres_settings
        self._lock: OwnerLock | None = None
        self._processes: list[ManagedProcess] = []
        self.endpoints: Endpoints | None = None
        self.leftovers_stopped: list[str] = []
        self.watch: ServerWatch | None = ServerWatch(self._respawned, die_with_owner=die_with_owner) if supervise else None

    @property
    def embedded(self) -> list[str]:
        """Names of the servers this object started ("redis", "postgres", "s3")."""
        return [p.name for p in self._processes]

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._processes)

    def missing(self) -> list[str]:
        """The backends the settings do not configure, which `start()` will run embedded."""
        s = self.settings
        wanted = {"redis": s.redis_url, "postgres": s.database_dsn, "s3": s.s3_endpoint}
        return [name for name, url in wanted.items() if not url]

    def start(self) -> Endpoints:
        """Start every missing backend and return where all three are. Idempotent."""
        if self.endpoints is not None:
            return self.endpoints
        self.layout.ensure()
        self._lock = OwnerLock.acquire(self.layout)
        atexit.register(self.stop)
        try:
            self.leftovers_stopped = clean_leftovers(self.layout)
            if self.leftovers_stopped:
                log.warning("stopped leftovers of a crashed run", processes=self.leftovers_stopped)
            self.endpoints = self._start_missing()
        except BaseException:
            self.stop()
            raise
        write_private(self.layout.endpoints_file, self.endpoints.to_shell())
        return self.endpoints

    def _start_missing(self) -> Endpoints:
        missing = self.missing()
        _require_s3_keys(self.settings, "s3" in missing)
        options = LaunchOptions(
            layout=self.layout,
            credentials=load_or_create_credentials(self.layout.root),
            durable=self._durable,
            die_with_owner=self._die_with_owner,
            start_timeout=self._start_timeout,
            postgres_settings=self._postgres_settings,
        )
        launchers = {  # slowest boot first, so the servers start up side by side
            "s3": lambda: launch_s3(options, self.settings.s3_region),
            "redis": lambda: launch_redis(options),
            "postgres": lambda: launch_postgres(options),
        }
        launched = {name: self._launch(launchers[name]) for name in launchers if name in missing}
        for name, server in launched.items():
            wait_until_ready(server.process, server.probe, self._start_timeout)
            if server.after_ready is not None:
                server.after_ready()
            log.info("embedded server ready", server=name, pid=server.process.record.pid)
        if self.watch is not None and launched:
            for server in launched.values():
                self.watch.watch(server.process, server.before_restart)
            self.watch.start()
        return self._endpoints(launched, options)

    def _respawned(self, old: ManagedProcess, new: ManagedProcess) -> None:
        """The watch restarted a server: keep the new process and record it in `state.json`."""
        self._processes = [new if process is old else process for process in self._processes]
        write_state(self.layout, [p.record for p in self._processes], self.embedded)

    def _launch(self, launcher: Any) -> Launched:
        server: Launched = launcher()
        self._processes.append(server.process)
        write_state(self.layout, [p.record for p in self._processes], self.embedded)
        return server

    def _endpoints(self, launched: dict[str, Launched], options: LaunchOptions) -> Endpoints:
        s, creds = self.settings, options.credentials
        s3_embedded = "s3" in launched
        return Endpoints(
            redis_url=launched["redis"].url if "redis" in launched else s.redis_url or "",
            database_url=launched["postgres"].url if "postgres" in launched else s.database_dsn or "",
            s3_endpoint=launched["s3"].url if s3_embedded else s.s3_endpoint or "",
            s3_access_key=creds.s3_access_key if s3_embedded else _secret(s.s3_access_key),
            s3_secret_key=creds.s3_secret_key if s3_embedded else _secret(s.s3_secret_key),
            s3_region=s.s3_region,
            s3_addressing_style="path" if s3_embedded else s.s3_addressing_style,
            data_dir=str(self.layout.root),
            redis_users_file=str(users_path(self.layout.root)) if "redis" in launched else None,
            postgres_roles_file=str(roles_path(self.layout.root)) if "postgres" in launched else None,
        )

    def stop(self) -> None:
        """Stop the watch, the embedded servers (reverse start order), release the data dir. Idempotent."""
        if self.watch is not None:
            self.watch.stop()
        for process in reversed(self._processes):
            try:
                process.stop()
            except Exception as exc:  # keep stopping the others; report this one
                log.error("could not stop embedded server", server=process.name, error=str(exc))
            if process.name == "s3":
                remove_weed_sockets(process.record.ports.values())
        self._processes.clear()
        self.endpoints = None
        if self._lock is not None:
            clear_state(self.layout)
            self._lock.release()
            self._lock = None
        atexit.unregister(self.stop)

    def __enter__(self) -> Endpoints:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Endpoints:
        import asyncio

        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        import asyncio

        await asyncio.to_thread(self.stop)


def _secret(value: Any) -> str:
    return value.get_secret_value() if value is not None else ""


def _require_s3_keys(settings: Settings, s3_embedded: bool) -> None:
    if not s3_embedded and not (settings.s3_access_key and settings.s3_secret_key):
        raise EmbeddedServerError(
            "CARDFLOW_S3_ENDPOINT is set but CARDFLOW_S3_ACCESS_KEY / CARDFLOW_S3_SECRET_KEY are not"
        )


def running_instance(data_dir: Path | str) -> Endpoints | None:
    """The endpoints of the live instance owning `data_dir`, or None if no instance runs there."""
    layout = Layout.of(data_dir)
    if not is_instance_running(layout):
        return None
    with contextlib.suppress(OSError, KeyError):
        return Endpoints.from_shell(layout.endpoints_file.read_text())
    return None  # still starting up: endpoints not written yet
