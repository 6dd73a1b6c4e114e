"""`KeptFleet` against real PostgreSQL: the fleet is read again only when a write moved its version."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from services.matcher.batch import NodeState
from services.matcher.service import MIGRATIONS
from services.matcher.store import KeptFleet, lock_fleet, save_nodes
from shared.delivery.db import create_pool
from shared.delivery.migrations import migrate
from shared.settings import Settings

pytestmark = pytest.mark.integration

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def node(node_id: str, card_type: str = "H100", gpus: int = 8) -> NodeState:
    return NodeState(node_id=node_id, agent_id=f"agent-{node_id}", card_type=card_type, gpus=gpus, alive=True, changed_at=AT)


async def read(kept: KeptFleet, conn: asyncpg.Connection) -> dict[str, int]:
    async with conn.transaction():
        await lock_fleet(conn, exclusive=False)
        return {node_id: state.gpus for node_id, state in (await kept.nodes(conn)).items()}


async def register(conn: asyncpg.Connection, *nodes: NodeState) -> None:
    """What a registration batch of any matcher instance writes."""
    async with conn.transaction():
        await lock_fleet(conn, exclusive=True)
        await save_nodes(conn, list(nodes))


async def test_the_kept_fleet_is_reused_until_a_write_moves_the_version(fresh_settings: Settings) -> None:
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=1) as pool:
        await migrate(pool, "matcher", MIGRATIONS)
        async with pool.acquire() as conn:
            kept = KeptFleet()
            empty = await read(kept, conn)
            await register(conn, node("n1"))
            registered = await read(kept, conn)
            # a change that bypasses the version (no matcher writes so) shows the kept copy is what is read
            await conn.execute("UPDATE matcher.fleet SET gpus = 4 WHERE node_id = 'n1'")
            kept_copy = await read(kept, conn)
            await register(conn, node("n2", "L40S"))
            reloaded = await read(kept, conn)
            fresh = await read(KeptFleet(), conn)

    assert empty == {}
    assert registered == {"n1": 8}
    assert kept_copy == {"n1": 8}
    assert reloaded == fresh == {"n1": 4, "n2": 8}


async def test_the_kept_fleet_cannot_be_changed_by_a_batch(fresh_settings: Settings) -> None:
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=1) as pool:
        await migrate(pool, "matcher", MIGRATIONS)
        async with pool.acquire() as conn:
            await register(conn, node("n1"))
            async with conn.transaction():
                nodes = await KeptFleet().nodes(conn)

    with pytest.raises(TypeError):
        nodes["n2"] = node("n2")  # type: ignore[index]
