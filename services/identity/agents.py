"""Enrolling a GPU host's agent — its own Redis ACL user, made through the API (`POST /v1/agents`) —
and unenrolling it (`DELETE /v1/agents/{id}`).

`enroll_agent` makes (or re-keys) user `agent.<id>` with the rules of `shared.redis_acl.agent_user`
(read only its own inbox `cf:agent:<id>` in its group, append to `cf:reports`) and a fresh password,
and emits `agent.enrolled` with the admin as actor and the reason, in the caller's transaction: if
Redis refuses, nothing is recorded. The password is returned once and never stored by cardflow —
except on the embedded Redis, whose users file keeps every user's password so that the ACL file
written at each start keeps the agent (`shared.embedded.redis_users.record_user`).

Making a Redis user needs `ACL SETUSER`, which Redis cannot limit to some user names: whoever may
run it is an admin. So the console holds no such right of its own (its user is `service.console`);
it uses `Settings.agent_enrolment_redis_url` when one is given (`cardflow up` gives the embedded
Redis's admin URL) and otherwise refuses with the commands an admin runs instead
(`EnrolmentUnavailable`).

`unenroll_agent` deletes `agent.<id>` (`ACL DELUSER`, which also closes the connections logged in
as it) and drops it from the embedded users file, and emits `agent.unenrolled` the same way. It
touches no lease: the agent can no longer report, so its leases expire unrenewed and their tasks
are requeued by the dispatcher's expiry sweep, as for any agent that went silent.

Both also keep the agent's row in `identity.agents` (who enrolled it, when and why; who unenrolled
it), in the same transaction as the event: `GET /v1/agents` lists them. Redis and PostgreSQL share
no transaction, so an unenrolment goes in three steps: (1) commit a request row
(`identity.unenrol_requests`: who asked, why); (2) delete the Redis user; (3) in one transaction,
emit `agent.unenrolled`, mark the agent's row and drop the request. If (3) fails after (2), the
request row remains: `finish_unenrolments` (run by the console at start and before it lists or
unenrols agents) records it with the asker as actor once the user is gone, or drops it when the user
is still there (the deletion never happened). Asked again, the agent's row — still enrolled — also
says a deletion went unrecorded: it is recorded then (`UnenrolledAgent.already_deleted`), instead of
"no such agent". `unenroll_stale_agents` does the same for the agent users `cardflow apply-logins
--prune-agents` found no longer listed, recorded with actor `system:apply-logins`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from services.common.runtime import Emitter
from services.identity.bootstrap import identity_pool, system_emitter
from services.identity.tokens import SCHEMA
from shared.embedded.redis_users import forget_user, record_user
from shared.events.emission import Emission
from shared.events.envelope import Envelope
from shared.events.identity import AgentEnrolled, AgentUnenrolled
from shared.redis_acl import RedisUserKind, agent_user, user_url


PRUNE_ACTOR = "system:apply-logins"
"""Who unenrolls the agents `cardflow apply-logins --prune-agents` prunes (it holds the Redis admin
and the database owner's passwords, no API token)."""


@dataclass(frozen=True)
class EnrolledAgent:
    agent_id: str
    redis_user: str
    password: str
    redis_url: str
    saved: bool  # the server wrote the user to its ACL file (it survives a restart of Redis)


@dataclass(frozen=True)
class UnenrolledAgent:
    agent_id: str
    redis_user: str
    saved: bool  # the server wrote its ACL file without the user (a restart of Redis does not bring it back)
    event_id: str
    already_deleted: bool = False  # Redis had no such user: an earlier deletion whose record was lost


@dataclass(frozen=True)
class AgentRecord:
    """An agent's row in `identity.agents`: who enrolled it and, once unenrolled, who did and why."""

    agent_id: str
    redis_user: str
    enrolled_at: datetime
    enrolled_by: str
    enrol_reason: str
    unenrolled_at: datetime | None
    unenrolled_by: str | None
    unenrol_reason: str | None


class UnknownAgentError(LookupError):
    """No Redis user `agent.<id>` on the server nor in the embedded users file: nothing to unenrol."""


class EnrolmentUnavailable(Exception):
    """This console may not make Redis users; the message says what an admin runs instead."""


class DeletionRefused(EnrolmentUnavailable):
    """Redis refused ACL DELUSER to the admin URL in use; `refused` is Redis's own answer."""

    def __init__(self, message: str, refused: str) -> None:
        super().__init__(message)
        self.refused = refused


def manual_steps(agent_id: str, why: str) -> str:
    return (
        f"this console cannot make Redis users ({why}). As a Redis admin, run the ACL SETUSER line that"
        f" `cardflow redis-users --agents-only --agent {agent_id}` prints (e.g. redis-cli -u \"$ADMIN_URL\" < file),"
        f" then give the agent CARDFLOW_REDIS_URL=redis://agent.{agent_id}:<password>@host:port/db; or set"
        " CARDFLOW_AGENT_ENROLMENT_REDIS_URL for the console to an admin URL (docs/running.md#5-security)"
    )


def manual_unenrol_steps(agent_id: str, why: str) -> str:
    return (
        f"this console cannot delete Redis users ({why}). As a Redis admin, run"
        f" `redis-cli -u \"$ADMIN_URL\" ACL DELUSER agent.{agent_id}` then `ACL SAVE` (or, where"
        f" `cardflow apply-logins` makes the users, run it again with --prune-agents and without --agent {agent_id});"
        " or set CARDFLOW_AGENT_ENROLMENT_REDIS_URL for the console to an admin URL (docs/running.md#5-security)"
    )


async def enroll_agent(
    conn: asyncpg.Connection, emitter: Emitter, enrolment_url: str | None, users_file: Path | None,
    agent_id: str, reason: str,
) -> EnrolledAgent:  # fmt: skip
    """Make `agent.<agent_id>` with a new password and record `agent.enrolled` (see the module docstring)."""
    if not enrolment_url:
        raise EnrolmentUnavailable(manual_steps(agent_id, "CARDFLOW_AGENT_ENROLMENT_REDIS_URL is not set"))
    user = agent_user(agent_id)
    password = secrets.token_urlsafe(24)
    [event] = await emitter.emit(conn, [Emission(AgentEnrolled, f"agent/{agent_id}", {"agent_id": agent_id, "redis_user": user.name,
                                                                                       "reason": reason})])  # fmt: skip
    await _record_enrolment(conn, agent_id, event, user.name, reason)
    saved = await _set_user(enrolment_url, agent_id, user.setuser_args(password))
    if users_file is not None:
        record_user(Path(users_file).parent, user, password)
    return EnrolledAgent(agent_id, user.name, password, user_url(enrolment_url, user.name, password), saved)


async def _set_user(enrolment_url: str, agent_id: str, setuser_args: list[str]) -> bool:
    """ACL SETUSER on the server, then ACL SAVE if it has an ACL file (False when it has none)."""
    admin = Redis.from_url(enrolment_url)
    try:
        try:
            await admin.execute_command("ACL", "SETUSER", *setuser_args)
        except (NoPermissionError, AuthenticationError) as refused:
            why = f"Redis refused ACL SETUSER to the user of CARDFLOW_AGENT_ENROLMENT_REDIS_URL: {refused}"
            raise EnrolmentUnavailable(manual_steps(agent_id, why)) from None
        try:
            await admin.execute_command("ACL", "SAVE")
        except ResponseError:  # no aclfile configured: the user lives until the server restarts
            return False
        return True
    finally:
        await admin.aclose()


async def unenroll_agent(
    pool: asyncpg.Pool, emitter: Emitter, enrolment_url: str | None, users_file: Path | None,
    agent_id: str, reason: str,
) -> UnenrolledAgent:  # fmt: skip
    """Delete `agent.<agent_id>` and record `agent.unenrolled` (the three steps of the module
    docstring); `UnknownAgentError` when no such user exists, and then nothing is recorded."""
    if not enrolment_url:
        raise EnrolmentUnavailable(manual_unenrol_steps(agent_id, "CARDFLOW_AGENT_ENROLMENT_REDIS_URL is not set"))
    user = agent_user(agent_id)
    async with pool.acquire() as conn:
        await _request_unenrolment(conn, agent_id, emitter.actor, reason)
        try:
            deleted, saved = await _delete_user(enrolment_url, agent_id, user.name)
        except DeletionRefused:
            await _drop_request(conn, agent_id)  # refused: certainly not deleted
            raise
        forgotten = forget_user(Path(users_file).parent, user.name) if users_file is not None else False
        try:
            async with conn.transaction():
                return await _record_unenrolled(conn, emitter, agent_id, reason, saved, deleted or forgotten)
        except UnknownAgentError:
            await _drop_request(conn, agent_id)
            raise


async def _record_unenrolled(conn: asyncpg.Connection, emitter: Emitter, agent_id: str, reason: str, saved: bool,
                             deleted_now: bool) -> UnenrolledAgent:  # fmt: skip
    """Step 3: the event, the agent's row and the request's end, in the caller's transaction."""
    user = agent_user(agent_id)
    [event] = await emitter.emit(conn, [Emission(AgentUnenrolled, f"agent/{agent_id}",
                                                 {"agent_id": agent_id, "redis_user": user.name, "reason": reason})])  # fmt: skip
    recorded_enrolled = await _record_unenrolment(conn, agent_id, event, reason)
    if not deleted_now and not recorded_enrolled:
        raise UnknownAgentError(f"no agent {agent_id!r} is enrolled: Redis has no user {user.name}; nothing unenrolled")
    await _drop_request(conn, agent_id)
    return UnenrolledAgent(agent_id, user.name, saved, event.event_id, already_deleted=not deleted_now)


async def _request_unenrolment(conn: asyncpg.Connection, agent_id: str, actor: str, reason: str) -> None:
    """Step 1, committed on its own: who asked to unenrol the agent, and why."""
    await conn.execute(
        """INSERT INTO identity.unenrol_requests (agent_id, requested_at, requested_by, reason) VALUES ($1, now(), $2, $3)
           ON CONFLICT (agent_id) DO UPDATE SET requested_at = now(), requested_by = EXCLUDED.requested_by,
               reason = EXCLUDED.reason""",
        agent_id, actor, reason,
    )  # fmt: skip


async def _drop_request(conn: asyncpg.Connection, agent_id: str) -> None:
    await conn.execute("DELETE FROM identity.unenrol_requests WHERE agent_id = $1", agent_id)


FINISH_AFTER = timedelta(seconds=60)
"""A request older than this is no longer in flight (its request ended, one way or another)."""


async def finish_unenrolments(pool: asyncpg.Pool, enrolment_url: str | None, producer: str,
                              older_than: timedelta = FINISH_AFTER) -> list[UnenrolledAgent]:  # fmt: skip
    """Settle the unenrol requests left behind (module docstring): record each whose Redis user is
    gone, as its asker and with its reason; drop each whose user is still there. Without an
    enrolment URL nothing can be checked, and nothing is done."""
    if not enrolment_url:
        return []
    finished = []
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT agent_id, requested_by, reason FROM identity.unenrol_requests"
                                " WHERE requested_at < now() - $1::interval ORDER BY agent_id", older_than)  # fmt: skip
        users = await _redis_users(enrolment_url) if rows else set()
        for row in rows:
            if agent_user(row["agent_id"]).name in users:
                await _drop_request(conn, row["agent_id"])
                continue
            emitter = Emitter(SCHEMA, producer, row["requested_by"])
            async with conn.transaction():
                try:
                    finished.append(await _record_unenrolled(conn, emitter, row["agent_id"], row["reason"], False, True))
                except UnknownAgentError:
                    await _drop_request(conn, row["agent_id"])
    return finished


async def _redis_users(enrolment_url: str) -> set[str]:
    """Every user name on the server (`ACL USERS`), asked once per settling."""
    admin = Redis.from_url(enrolment_url)
    try:
        return {user.decode() if isinstance(user, bytes) else user for user in await admin.acl_users()}
    finally:
        await admin.aclose()


async def _record_enrolment(conn: asyncpg.Connection, agent_id: str, event: Envelope, redis_user: str, reason: str) -> None:
    """The agent's row, enrolled (again: an earlier unenrolment is cleared)."""
    await conn.execute(
        """INSERT INTO identity.agents (agent_id, redis_user, enrolled_at, enrolled_by, enrol_reason, enrol_event_id)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (agent_id) DO UPDATE SET redis_user = EXCLUDED.redis_user, enrolled_at = EXCLUDED.enrolled_at,
               enrolled_by = EXCLUDED.enrolled_by, enrol_reason = EXCLUDED.enrol_reason,
               enrol_event_id = EXCLUDED.enrol_event_id, unenrolled_at = NULL, unenrolled_by = NULL,
               unenrol_reason = NULL, unenrol_event_id = NULL""",
        agent_id, redis_user, event.occurred_at, event.actor, reason, event.event_id,
    )  # fmt: skip


async def _record_unenrolment(conn: asyncpg.Connection, agent_id: str, event: Envelope, reason: str) -> bool:
    """Mark the agent's row unenrolled; True when it was recorded as enrolled until now."""
    marked = await conn.fetchval(
        """UPDATE identity.agents SET unenrolled_at = $2, unenrolled_by = $3, unenrol_reason = $4, unenrol_event_id = $5
           WHERE agent_id = $1 AND unenrolled_at IS NULL RETURNING agent_id""",
        agent_id, event.occurred_at, event.actor, reason, event.event_id,
    )  # fmt: skip
    return marked is not None


async def load_agent_records(conn: asyncpg.Connection) -> list[AgentRecord]:
    """Every agent cardflow enrolled (enrolled ones first, then by id)."""
    rows = await conn.fetch(
        """SELECT agent_id, redis_user, enrolled_at, enrolled_by, enrol_reason, unenrolled_at, unenrolled_by,
                  unenrol_reason FROM identity.agents ORDER BY unenrolled_at IS NOT NULL, agent_id"""
    )  # fmt: skip
    return [AgentRecord(**dict(row)) for row in rows]


async def unenroll_stale_agents(database_url: str, admin_url: str, users: Sequence[str], reason: str) -> list[UnenrolledAgent]:
    """`unenroll_agent` for each of `users` (`agent.<id>`) as `PRUNE_ACTOR`, each in its own steps (a
    deletion is committed with its event); one deleted meanwhile by someone else is skipped (its own
    event says who)."""
    unenrolled = []
    emitter = system_emitter("apply-logins", PRUNE_ACTOR)
    async with identity_pool(database_url) as pool:
        for name in users:
            agent_id = name.removeprefix(f"{RedisUserKind.AGENT}.")
            try:
                unenrolled.append(await unenroll_agent(pool, emitter, admin_url, None, agent_id, reason))
            except UnknownAgentError:
                continue
    return unenrolled


async def _delete_user(enrolment_url: str, agent_id: str, name: str) -> tuple[bool, bool]:
    """ACL DELUSER on the server, then ACL SAVE if it has an ACL file: (deleted, saved)."""
    admin = Redis.from_url(enrolment_url)
    try:
        try:
            deleted = bool(await admin.execute_command("ACL", "DELUSER", name))
        except (NoPermissionError, AuthenticationError) as refused:
            why = f"Redis refused ACL DELUSER to the user of CARDFLOW_AGENT_ENROLMENT_REDIS_URL: {refused}"
            raise DeletionRefused(manual_unenrol_steps(agent_id, why), str(refused)) from None
        try:
            await admin.execute_command("ACL", "SAVE")
        except ResponseError:  # no aclfile: a user defined in redis.conf comes back at the next restart
            return deleted, False
        return deleted, True
    finally:
        await admin.aclose()
