"""Which login each cardflow process has on Redis and PostgreSQL, and where its password comes from (pure).

A process's login pairs its Redis ACL user (`shared.redis_acl`: `service.<name>`, `gate`,
`agent.<id>`, `upstream.<name>`) with its PostgreSQL role (`shared.pg_roles`: `cardflow_<service>`;
agents and upstreams have none, they never touch the database). Nothing here defines a right: the
rules are those two modules'; this only lists the logins an installation has.

`cardflow apply-logins` (the one-shot set-up container of docker-compose.yml) reads each password
from the environment variable `password_variable` names, one per process and backend (as each
Deployment's Secret in deploy/kubernetes holds one of each): `CARDFLOW_INTAKE_REDIS_PASSWORD`,
`CARDFLOW_INTAKE_POSTGRES_PASSWORD`, `CARDFLOW_GATE_REDIS_PASSWORD`,
`CARDFLOW_AGENT_SIM_H100_1_REDIS_PASSWORD`, ... `stale_agent_users` names the agent users a server
has that no login lists (what `cardflow apply-logins --prune-agents` deletes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from shared.pg_roles import SERVICE_ROLES, role_name
from shared.redis_acl import GATE_USER, RedisUser, RedisUserKind, agent_user, gate_user, service_user, upstream_user


class Backend(StrEnum):
    REDIS = "redis"
    POSTGRES = "postgres"


@dataclass(frozen=True)
class ProcessLogin:
    """One process's Redis user and (services only) the service whose PostgreSQL role it logs in as."""

    redis_user: RedisUser
    pg_service: str | None = None

    @property
    def pg_role(self) -> str | None:
        return role_name(self.pg_service) if self.pg_service else None

    @property
    def redis_password_variable(self) -> str:
        return password_variable(self.redis_user.name, Backend.REDIS)

    @property
    def postgres_password_variable(self) -> str | None:
        return password_variable(self.redis_user.name, Backend.POSTGRES) if self.pg_service else None

    @property
    def password_variables(self) -> tuple[str, ...]:
        return tuple(v for v in (self.redis_password_variable, self.postgres_password_variable) if v)


class DuplicateLoginError(ValueError):
    """Two logins would read their passwords from the same variables (e.g. agents `a-1` and `a_1`)."""


def password_variable(redis_user: str, backend: Backend) -> str:
    """(`service.intake`, postgres) -> `CARDFLOW_INTAKE_POSTGRES_PASSWORD`;
    (`agent.sim-h100-1`, redis) -> `CARDFLOW_AGENT_SIM_H100_1_REDIS_PASSWORD`."""
    subject = re.sub(r"[^A-Za-z0-9]", "_", redis_user.removeprefix("service.")).upper()
    return f"CARDFLOW_{subject}_{backend.upper()}_PASSWORD"


def service_login(service: str) -> ProcessLogin:
    """A service process (or the gate): its Redis user and its PostgreSQL role."""
    user = gate_user() if service == GATE_USER else service_user(service)
    return ProcessLogin(user, pg_service=service)


def process_logins(agents: tuple[str, ...] = (), upstreams: tuple[str, ...] = ()) -> list[ProcessLogin]:
    """Every service's login (one per PostgreSQL service role; `shared.redis_acl.system_users` are the
    same processes), then one per agent id and upstream name. Raises `DuplicateLoginError` when two
    would share a password variable, `shared.redis_acl.UnsafeNameError` for a name that cannot be a user."""
    logins = [service_login(service) for service in SERVICE_ROLES]
    logins += [ProcessLogin(agent_user(agent)) for agent in dict.fromkeys(agents)]
    logins += [ProcessLogin(upstream_user(name)) for name in dict.fromkeys(upstreams)]
    seen: dict[str, str] = {}
    for login in logins:
        other = seen.setdefault(login.redis_password_variable, login.redis_user.name)
        if other != login.redis_user.name:
            raise DuplicateLoginError(f"{other} and {login.redis_user.name} would both read {login.redis_password_variable}")
    return logins


def stale_agent_users(existing: Iterable[str], logins: Sequence[ProcessLogin]) -> list[str]:
    """The Redis users named `agent.*` among `existing` that no login lists (sorted): agents no longer
    part of the installation that can still log in. Service, gate and upstream users are never stale."""
    listed = {login.redis_user.name for login in logins}
    prefix = f"{RedisUserKind.AGENT}."
    return sorted(name for name in existing if name.startswith(prefix) and name not in listed)
