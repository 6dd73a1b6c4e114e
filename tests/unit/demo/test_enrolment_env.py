"""`cardflow up` lets its console enrol agents (POST /v1/agents) only on the embedded Redis."""

from __future__ import annotations

from services.demo.system import enrolment_env
from shared.embedded.endpoints import Endpoints

ADMIN = "redis://:admin-secret@127.0.0.1:6390/0"


def endpoints(users_file: str | None) -> Endpoints:
    return Endpoints(redis_url=ADMIN, database_url="postgresql://o:p@h/cardflow", s3_endpoint="http://h:1",
                     s3_access_key="k", s3_secret_key="s", redis_users_file=users_file)  # fmt: skip


def test_the_embedded_redis_admin_url_is_the_consoles_enrolment_url() -> None:
    assert enrolment_env(endpoints("/data/redis-users.json")) == {"CARDFLOW_AGENT_ENROLMENT_REDIS_URL": ADMIN}


def test_an_external_redis_admin_url_is_never_handed_to_the_console() -> None:
    assert enrolment_env(endpoints(None)) == {}
