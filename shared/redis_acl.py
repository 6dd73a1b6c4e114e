"""Redis ACL users of cardflow: which process may run which commands on which keys (pure).

One user per process kind, so a stolen or buggy credential reaches only what its owner needs:

| user                | may                                                                       |
|---------------------|---------------------------------------------------------------------------|
| `service.<name>`    | append its own event stream `cf:events:<schema>` (the outbox relay),       |
|                     | read in groups (and trim) the streams it consumes, dead-letter            |
| `service.dispatcher`| also append to and trim agent inboxes `cf:agent:*`                        |
| `service.console`   | also read and delete dead letters, replay them onto `cf:ingest*` only     |
| `gate`              | read `cf:events:*` in its group, append `cf:events` and the routed        |
|                     | streams `cf:routed:*` (the only writer of both; EVAL: one script appends  |
|                     | a routed event to all its streams, each XADD checked against these keys)  |
| `agent.<id>`        | append `cf:reports`; read in its group only its own inbox `cf:agent:<id>` |
| `upstream.<name>`   | append its own `cf:ingest:<name>` (intake: actor `upstream:<name>`), nothing else |
| `default`           | everything: `cardflow up`, `cardflow doctor`, tests (never handed to a service) |

The rules need Redis >= 7 (Valkey >= 7.2): a user gets different commands on different keys
through selectors `( ... )`. On Redis 6.2 (no selectors) `flattened` gives a coarser set
(docs/running.md#security says which guarantees then hold).

`acl_file_line` renders a user for an ACL file (password given as its SHA-256, so the file never
holds a password); `setuser_args` for `ACL SETUSER` on a running server.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum

from shared.names import (
    ALERTS_GROUP,
    DEADLETTER_STREAM,
    EVENTS_STREAM,
    INGEST_STREAM,
    MATCHER_GROUP,
    READINESS_GROUP,
    REPORTS_STREAM,
    agent_inbox,
    ingest_stream,
    producer_stream,
    routed_stream,
)

ADMIN_USER = "default"
GATE_USER = "gate"

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
"""Agent ids and upstream names that may become ACL users: no glob characters (`*?[]`), which
would widen a key pattern such as `~cf:agent:<id>` to other agents' inboxes, and nothing a URL
must escape."""

CONNECTION = ("+ping", "+hello", "+client|setinfo", "+client|setname", "+client|id", "+select", "+info")
"""Connection set-up every client library sends (redis-py: HELLO, CLIENT SETINFO), PING, and INFO
(`redis_version`; the agent's restart detection reads `run_id`)."""

GROUP_READ = ("+xreadgroup", "+xack", "+xautoclaim", "+xclaim", "+xpending", "+xgroup|create", "+xinfo|groups")
"""Reading a stream in a consumer group with a claimer (shared.delivery.consumer)."""

TRIM = ("+xtrim", "+xrange", "+xlen", "+xinfo|groups", "+xpending")
"""Retention of a stream its readers have passed (shared.delivery.retention)."""

TRANSACTION = ("+multi", "+exec", "+discard")
"""Dead-letter + ack in one MULTI (shared.delivery.deadletter)."""


class RedisUserKind(StrEnum):
    SERVICE = "service"
    AGENT = "agent"
    UPSTREAM = "upstream"
    GATE = "gate"


class UnsafeNameError(ValueError):
    """A name that cannot become (part of) a Redis user or key pattern safely."""


@dataclass(frozen=True)
class ServiceStreams:
    """What one service process does on Redis: the streams it consumes, whether it writes agent inboxes."""

    consumes: tuple[str, ...] = ()
    event_schemas: tuple[str, ...] = ()  # the outboxes its relay publishes (`cf:events:<schema>`)
    writes_agent_inboxes: bool = False
    appends: tuple[str, ...] = ()  # other streams it may append to
    handles_deadletters: bool = False  # lists, replays (onto `appends` only) and purges cf:deadletter


SERVICE_STREAMS: dict[str, ServiceStreams] = {
    "intake": ServiceStreams(consumes=(INGEST_STREAM, ingest_stream("*")), event_schemas=("intake",)),
    "readiness": ServiceStreams(consumes=(routed_stream(READINESS_GROUP),), event_schemas=("readiness",)),
    "matcher": ServiceStreams(consumes=(routed_stream(MATCHER_GROUP),), event_schemas=("matcher",)),
    "dispatcher": ServiceStreams(consumes=(EVENTS_STREAM, REPORTS_STREAM), event_schemas=("dispatcher",), writes_agent_inboxes=True),
    "ledger": ServiceStreams(consumes=(EVENTS_STREAM, routed_stream(ALERTS_GROUP)), event_schemas=("ledger",)),
    "views": ServiceStreams(consumes=(EVENTS_STREAM,)),  # a read model: emits nothing
    "config": ServiceStreams(event_schemas=("config",)),
    "console": ServiceStreams(event_schemas=("identity",), appends=(INGEST_STREAM, ingest_stream("*")), handles_deadletters=True),
}
"""Service process -> its Redis traffic. `console` is the HTTP API process (it relays the identity
outbox; the intake commands it runs are published by intake's relay). Readiness, the matcher and the
ledger's alerter read their routed streams (`shared.events.routing.ROUTES`), not `cf:events`."""


@dataclass(frozen=True)
class RedisUser:
    """One ACL user: its name and its rules (after `reset on`, before the password)."""

    name: str
    kind: RedisUserKind
    rules: tuple[str, ...]

    def acl_file_line(self, password: str) -> str:
        """`user NAME on #<sha256> <rules>`: a line of a Redis ACL file."""
        return " ".join(["user", self.name, "on", f"#{password_sha256(password)}", "resetchannels", *self.rules])

    def setuser_args(self, password: str) -> list[str]:
        """Arguments of `ACL SETUSER` that make this user exactly so (reset first)."""
        return [self.name, "reset", "on", f"#{password_sha256(password)}", "resetchannels", *self.rules]


def password_sha256(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def require_safe_name(kind: str, name: str) -> str:
    if not SAFE_NAME.match(name):
        raise UnsafeNameError(
            f"{kind} name {name!r} cannot be a Redis user: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def _selector(commands: tuple[str, ...], *keys: str) -> str:
    return "(" + " ".join([*dict.fromkeys(commands), *(f"~{key}" for key in keys)]) + ")"


def service_user(service: str) -> RedisUser:
    """`service.<name>`: its relay's streams, the streams it consumes, dead-letters (see module table)."""
    if service not in SERVICE_STREAMS:
        raise KeyError(f"unknown service {service!r}; known: {', '.join(SERVICE_STREAMS)}")
    streams = SERVICE_STREAMS[service]
    appends = [producer_stream(schema) for schema in streams.event_schemas]
    rules = [*CONNECTION, *TRANSACTION, "+scan", "+xadd", *(f"~{key}" for key in (*appends, *streams.appends, DEADLETTER_STREAM))]
    if appends:  # retention prunes outbox rows once their entry left the stream: it looks there
        rules.append(_selector(("+xrange", "+xlen"), *appends))
    if streams.consumes:
        rules.append(_selector((*GROUP_READ, *TRIM), *streams.consumes))
    if streams.writes_agent_inboxes:
        rules.append(_selector(("+xadd", *TRIM), agent_inbox("*")))
    if streams.handles_deadletters:
        rules.append(_selector(("+xrange", "+xrevrange", "+xlen", "+xdel"), DEADLETTER_STREAM))
    return RedisUser(f"service.{service}", RedisUserKind.SERVICE, tuple(rules))


def trimmed_streams(service: str) -> tuple[str, ...]:
    """The stream patterns the retention sweep of `service` trims: the ones it reads (and, for the
    dispatcher, the agent inboxes it writes; for the gate, the producer streams). A process not in
    the table (a test's own spec) trims every `cf:*` stream."""
    if service == GATE_USER:
        return (producer_stream("*"),)
    if service not in SERVICE_STREAMS:
        return ("cf:*",)
    streams = SERVICE_STREAMS[service]
    return (*streams.consumes, *((agent_inbox("*"),) if streams.writes_agent_inboxes else ()))


def gate_user() -> RedisUser:
    """`gate`: reads every producer stream in its group and alone appends `cf:events` and the routed streams."""
    rules = (
        *CONNECTION, *TRANSACTION, "+scan", "+xadd", "+eval", f"~{EVENTS_STREAM}", f"~{routed_stream('*')}",
        f"~{DEADLETTER_STREAM}",
        _selector((*GROUP_READ, *TRIM), producer_stream("*")),
        _selector(("+xrange", "+xlen", "+xinfo|groups", "+xpending", "+xtrim"), EVENTS_STREAM),
        _selector(("+set", "+get", "+pexpire", "+watch", "+unwatch", "+del"), GATE_LOCK_KEY),
    )  # fmt: skip
    return RedisUser(GATE_USER, RedisUserKind.GATE, rules)


GATE_LOCK_KEY = "cf:gate:lock"
"""Held by the one gate instance that forwards (others wait), so each producer's order is kept."""


def agent_user(agent_id: str) -> RedisUser:
    """`agent.<id>`: appends reports, reads its own inbox in its group — never another's."""
    require_safe_name("agent", agent_id)
    rules = (
        *CONNECTION, *TRANSACTION, "+xadd", f"~{REPORTS_STREAM}", f"~{DEADLETTER_STREAM}",
        _selector(GROUP_READ, agent_inbox(agent_id)),
    )  # fmt: skip
    return RedisUser(f"agent.{agent_id}", RedisUserKind.AGENT, rules)


def upstream_user(name: str) -> RedisUser:
    """`upstream.<name>`: appends to its own `cf:ingest:<name>`, nothing else (it cannot read what
    others sent, nor write where intake would record another actor)."""
    require_safe_name("upstream", name)
    return RedisUser(f"upstream.{name}", RedisUserKind.UPSTREAM, (*CONNECTION, "+xadd", f"~{ingest_stream(name)}"))


def system_users() -> list[RedisUser]:
    """The users every installation has: one per service process, and the gate."""
    return [*(service_user(name) for name in SERVICE_STREAMS), gate_user()]


def flattened(user: RedisUser) -> RedisUser:
    """The same user for Redis 6.2, which has no selectors: every command of the user on every key of
    the user. Coarser: an agent may then also read `cf:reports` in a group and append to its own
    inbox, and a service may append to every stream it reads (cf:events included, so there the
    gate is bypassable and consumers' producer check is the last line). Inboxes stay private."""
    commands: list[str] = []
    keys: list[str] = []
    for rule in user.rules:
        for word in rule.strip("()").split():
            (keys if word.startswith("~") else commands).append(word)
    return RedisUser(user.name, user.kind, (*dict.fromkeys(commands), *dict.fromkeys(keys)))


def admin_file_line(password: str) -> str:
    """The `default` user of an ACL file: every command on every key, password required."""
    return f"user {ADMIN_USER} on #{password_sha256(password)} ~* &* +@all"


def user_url(admin_url: str, user: str, password: str) -> str:
    """`admin_url` with `user:password` instead of the admin's credentials (same host, port, db)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(admin_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))
