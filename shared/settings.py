"""Process settings from the environment (`CARDFLOW_*`), one typed object for every backend.

Every backend is reached by configuration alone: a managed PostgreSQL, any Redis >= 6.2 and any
S3-compatible store (endpoint, region, credentials, path-style addressing). Secrets are
`SecretStr`, so they never appear in reprs, logs or `cardflow doctor` output.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Where the backends are. Unset URLs mean "start an embedded server" under `data_dir`."""

    model_config = SettingsConfigDict(env_prefix="CARDFLOW_", env_file=None, extra="ignore")

    redis_url: str | None = Field(None, description="redis://[user:pass@]host:port/db")
    database_url: SecretStr | None = Field(None, description="postgresql://user:pass@host:port/db")
    s3_endpoint: str | None = Field(None, description="http(s)://host:port of an S3-compatible store")
    s3_access_key: SecretStr | None = None
    s3_secret_key: SecretStr | None = None
    s3_region: str = "us-east-1"
    s3_addressing_style: Literal["path", "virtual", "auto"] = "path"
    s3_bucket_prefix: str = Field(
        "",
        pattern=r"^([a-z0-9][a-z0-9-]{0,29})?$",
        description="prepended to cardflow's bucket names (cardflow-config, cardflow-reports, cardflow-archive): "
        "bucket names are global on most clouds, so e.g. `acme-` gives acme-cardflow-config",
    )
    data_dir: Path = Path(".cardflow")
    instance: str = Field("local", description="name of this process instance, used in event producers")
    metrics_port: int | None = Field(
        None, ge=0, le=65535,
        description="serve Prometheus /metrics on this port (each service; the agent daemon does not serve it yet; unset = off)",
    )
    tracing: Literal["off", "otlp", "console"] = Field(
        "off", description="OpenTelemetry tracing of message handling: otlp (OTEL_EXPORTER_OTLP_* settings) or console"
    )
    ingest_upstreams: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="upstream systems with a stream of their own, comma-separated: intake reads cf:ingest:<name> and "
        "records its entries as actor upstream:<name> (docs/ingest.md)",
    )
    ingest_default_upstream: str = Field(
        "ingest", description="the upstream name entries on the shared cf:ingest are recorded under (actor upstream:<name>)"
    )
    agent_enrolment_redis_url: SecretStr | None = Field(
        None, description="a Redis URL whose user may run ACL SETUSER and ACL DELUSER (an admin): the console uses it"
        " only to make an agent's own Redis user for POST /v1/agents (`cardflow enroll`) and to delete it for"
        " DELETE /v1/agents/{id} (`cardflow unenroll`); unset = those endpoints answer 409 with the commands to run."
        " `cardflow up` sets it to the embedded Redis's admin URL (docs/running.md#5-security)",
    )
    redis_users_file: Path | None = Field(
        None, description="the embedded Redis's users file (set by `cardflow up`): an enrolled agent is kept there too,"
        " so it survives a restart of the embedded server; an unenrolled one is removed, so no restart brings it back",
    )

    @field_validator("ingest_upstreams", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @field_validator("ingest_upstreams", "ingest_default_upstream")
    @classmethod
    def _safe_upstream_names(cls, value: Any) -> Any:
        from shared.redis_acl import require_safe_name  # each name becomes a Redis user and a stream key

        for name in (value,) if isinstance(value, str) else value:
            require_safe_name("upstream", name)
        return value

    @property
    def database_dsn(self) -> str | None:
        return self.database_url.get_secret_value() if self.database_url else None

    def redacted(self) -> dict[str, str | None]:
        """The settings as strings safe to print: passwords in URLs and keys replaced by ***."""
        return {
            "CARDFLOW_REDIS_URL": redact_url(self.redis_url),
            "CARDFLOW_DATABASE_URL": redact_url(self.database_dsn),
            "CARDFLOW_S3_ENDPOINT": self.s3_endpoint,
            "CARDFLOW_S3_ACCESS_KEY": "***" if self.s3_access_key else None,
            "CARDFLOW_S3_SECRET_KEY": "***" if self.s3_secret_key else None,
            "CARDFLOW_S3_REGION": self.s3_region,
            "CARDFLOW_S3_ADDRESSING_STYLE": self.s3_addressing_style,
            "CARDFLOW_S3_BUCKET_PREFIX": self.s3_bucket_prefix,
            "CARDFLOW_DATA_DIR": str(self.data_dir),
        }


def redact_url(url: str | None) -> str | None:
    """Replace the password of a URL with *** (`redis://u:***@h:1/0`)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, read once from the environment."""
    return Settings()
