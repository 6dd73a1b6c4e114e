"""Leadership: one active dispatcher, fenced by an epoch every persisting transaction re-checks.

The leader holds a session-level PostgreSQL advisory lock on a DEDICATED connection (not a pooled
one: the lock lives as long as that session). On acquiring it, the instance increments
`leader.epoch` and remembers the value. Every transaction that writes the dispatcher's state is a
`FencedTransaction`: its BEGIN goes to PostgreSQL together with the epoch check (the function
`check_leader_epoch`, migration 007), in one round trip, before anything else the transaction does.
The check reads the row FOR SHARE: if a newer leader has taken over, the transaction is rolled back
and `LeadershipLost` raised, nothing written; and while the check's share lock is held, a new
leader's epoch increment waits, so a deposed leader's last transaction is ordered before the takeover.

A standby instance loops on `pg_try_advisory_lock` until the lock frees (the leader stopped, or its
session died) and takes over.
"""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg
from asyncpg.transaction import Transaction, TransactionState

from shared.delivery.db import quote_schema
from shared.delivery.migrations import advisory_key
from shared.event_wait import wait_until_set
from shared.logging import get_logger

log = get_logger(__name__)


class LeadershipLost(RuntimeError):
    """Another dispatcher instance became leader (or this one lost its lock); stop writing."""


class LeaderLock:
    """The leader lock of one dispatcher instance."""

    def __init__(self, dsn: str, schema: str, holder: str) -> None:
        self._dsn = dsn
        self._schema = schema
        self._holder = holder
        self._key = advisory_key("leader", schema)
        self._conn: asyncpg.Connection | None = None
        self.epoch: int | None = None

    async def acquire(self, stop: asyncio.Event, poll_s: float) -> int | None:
        """Wait until this instance holds the lock; return the new epoch (None if `stop` came first)."""
        self._conn = await asyncpg.connect(self._dsn)
        waiting_logged = False
        while not stop.is_set():
            if await self._conn.fetchval("SELECT pg_try_advisory_lock($1)", self._key):
                self.epoch = await self._conn.fetchval(
                    f"UPDATE {quote_schema(self._schema)}.leader SET epoch = epoch + 1, holder = $1,"
                    " acquired_at = now() WHERE id = 1 RETURNING epoch",
                    self._holder,
                )
                log.info("dispatcher is leader", epoch=self.epoch, holder=self._holder)
                return self.epoch
            if not waiting_logged:
                log.info("dispatcher is standby; waiting for the leader lock", holder=self._holder)
                waiting_logged = True
            await wait_until_set(stop, poll_s)
        return None

    async def still_held(self) -> bool:
        """True while the dedicated session (and with it the lock) is alive."""
        if self._conn is None or self._conn.is_closed() or self.epoch is None:
            return False
        try:
            return bool(await self._conn.fetchval("SELECT true"))
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            return False

    async def release(self) -> None:
        """End the session; PostgreSQL frees the lock with it."""
        if self._conn is not None and not self._conn.is_closed():
            with contextlib.suppress(Exception):
                await self._conn.close()
        self._conn = None


LEADERSHIP_LOST_SQLSTATE = "CF001"  # raised by check_leader_epoch (migration 007)


class FencedTransaction(Transaction):
    """asyncpg's top-level transaction whose BEGIN carries the leader epoch check in the same round trip.

    It is asyncpg's own transaction object (so a `conn.transaction()` nested in it is a savepoint and
    its exit commits or rolls back as usual); only the start differs: `BEGIN; SELECT
    check_leader_epoch(epoch)` as one simple query. A stale epoch: rolled back, `LeadershipLost`.
    """

    __slots__ = ("_fence",)

    def __init__(self, conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy, schema: str, epoch: int) -> None:
        if isinstance(conn, asyncpg.pool.PoolConnectionProxy):
            conn = conn._con  # what `conn.transaction()` holds too: the connection itself
        super().__init__(conn, None, False, False)
        self._fence = f"SELECT {quote_schema(schema)}.check_leader_epoch({int(epoch)})"

    async def start(self) -> None:
        conn = self._connection
        if conn._top_xact is not None or conn.is_in_transaction():
            raise asyncpg.InterfaceError("a fenced transaction must be the connection's outermost one")
        conn._top_xact = self
        try:
            await conn.execute(f"BEGIN; {self._fence};")
        except asyncpg.PostgresError as error:  # the check (or BEGIN) failed: leave the aborted transaction
            self._state = TransactionState.FAILED
            conn._top_xact = None
            await conn.execute("ROLLBACK")
            if error.sqlstate == LEADERSHIP_LOST_SQLSTATE:
                raise LeadershipLost(str(error)) from None
            raise
        except BaseException:  # cancelled, or the connection broke: the pool's reset rolls back
            self._state = TransactionState.FAILED
            raise
        self._state = TransactionState.STARTED
