"""`Endpoints`: where the three backends of one cardflow instance are, as plain strings.

The same value comes from the environment (external backends), from freshly started embedded
servers, or from a running instance's `run/endpoints.env`. It renders as `CARDFLOW_*` variables,
as `Settings`, and as a redacted table; its repr never shows a secret.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shared.settings import Settings, redact_url

ENV_NAMES = {
    "redis_url": "CARDFLOW_REDIS_URL",
    "database_url": "CARDFLOW_DATABASE_URL",
    "s3_endpoint": "CARDFLOW_S3_ENDPOINT",
    "s3_access_key": "CARDFLOW_S3_ACCESS_KEY",
    "s3_secret_key": "CARDFLOW_S3_SECRET_KEY",
    "s3_region": "CARDFLOW_S3_REGION",
    "s3_addressing_style": "CARDFLOW_S3_ADDRESSING_STYLE",
    "data_dir": "CARDFLOW_DATA_DIR",
    "redis_users_file": "CARDFLOW_REDIS_USERS_FILE",
    "postgres_roles_file": "CARDFLOW_POSTGRES_ROLES_FILE",
}
OPTIONAL = ("s3_region", "s3_addressing_style", "data_dir", "redis_users_file", "postgres_roles_file")


@dataclass(frozen=True)
class Endpoints:
    """Connection settings of Redis, PostgreSQL and S3 (secrets included; never print `as_env()`)."""

    redis_url: str = field(repr=False)
    database_url: str = field(repr=False)
    s3_endpoint: str
    s3_access_key: str = field(repr=False)
    s3_secret_key: str = field(repr=False)
    s3_region: str = "us-east-1"
    s3_addressing_style: str = "path"
    data_dir: str | None = None
    redis_users_file: str | None = None  # the embedded Redis's users (shared.embedded.redis_users), else None
    postgres_roles_file: str | None = None  # the embedded PostgreSQL's service roles (shared.embedded.pg_users)

    def as_env(self) -> dict[str, str]:
        """The `CARDFLOW_*` variables that make a process connect to these backends."""
        values = {attr: getattr(self, attr) for attr in ENV_NAMES}
        return {ENV_NAMES[attr]: str(value) for attr, value in values.items() if value is not None}

    def redis_url_for(self, user: str) -> str:
        """The Redis URL of process `user` (`service.intake`, `agent.h100-a`, ...): its own ACL user on
        the embedded Redis, else the configured URL (shared.embedded.redis_users.user_url)."""
        from shared.embedded.redis_users import user_url

        return user_url(self.redis_users_file, self.redis_url, user)

    def database_url_for(self, service: str) -> str:
        """The DSN of service `service`: its own role on the embedded PostgreSQL, else the configured one."""
        from shared.embedded.pg_users import service_dsn

        return service_dsn(self.postgres_roles_file, self.database_url, service)

    def settings(self) -> Settings:
        """A `Settings` object pointing at these backends (ignores the process environment)."""
        extra = {"data_dir": Path(self.data_dir)} if self.data_dir else {}
        return Settings(
            redis_url=self.redis_url,
            database_url=self.database_url,
            s3_endpoint=self.s3_endpoint,
            s3_access_key=self.s3_access_key,
            s3_secret_key=self.s3_secret_key,
            s3_region=self.s3_region,
            s3_addressing_style=self.s3_addressing_style,  # type: ignore[arg-type]
            **extra,
        )

    def redacted(self) -> dict[str, str]:
        """Each backend's location, safe to print: passwords and keys replaced by ***."""
        return {
            "redis": redact_url(self.redis_url) or "",
            "postgres": redact_url(self.database_url) or "",
            "s3": f"{self.s3_endpoint} (region {self.s3_region}, {self.s3_addressing_style}-style, key ***)",
        }

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.redacted().items())
        return f"Endpoints({shown}, data_dir={self.data_dir!r})"

    def to_shell(self) -> str:
        """`export CARDFLOW_...=...` lines, quoted for POSIX shells (contains secrets)."""
        return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in self.as_env().items())

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Endpoints:
        """Parse `CARDFLOW_*` variables; raises KeyError naming the first missing one."""
        required = ENV_NAMES.keys() - set(OPTIONAL)
        values = {attr: env[ENV_NAMES[attr]] for attr in required}
        optional = {a: env[ENV_NAMES[a]] for a in OPTIONAL if ENV_NAMES[a] in env}
        return cls(**values, **optional)

    @classmethod
    def from_shell(cls, text: str) -> Endpoints:
        """Parse what `to_shell` wrote."""
        env: dict[str, str] = {}
        for line in text.splitlines():
            words = shlex.split(line)
            if len(words) == 2 and words[0] == "export" and "=" in words[1]:
                key, value = words[1].split("=", 1)
                env[key] = value
        return cls.from_env(env)
