"""Secrets of the embedded servers: generated once per data directory, kept in a 0600 file.

A data directory keeps its credentials across restarts (the PostgreSQL role and the S3 identity
are created with them), and no two data directories share any.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Credentials:
    redis_password: str
    postgres_password: str
    s3_access_key: str
    s3_secret_key: str

    @classmethod
    def generate(cls) -> Credentials:
        return cls(
            redis_password=secrets.token_urlsafe(24),
            postgres_password=secrets.token_urlsafe(24),
            s3_access_key="CF" + secrets.token_hex(9).upper(),
            s3_secret_key=secrets.token_urlsafe(30),
        )


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by the owner only (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def load_or_create_credentials(data_dir: Path) -> Credentials:
    """The credentials of `data_dir`, generated and stored on first use."""
    path = data_dir / "credentials.json"
    if path.exists():
        return Credentials(**json.loads(path.read_text()))
    creds = Credentials.generate()
    write_private(path, json.dumps(asdict(creds), indent=2))
    return creds
