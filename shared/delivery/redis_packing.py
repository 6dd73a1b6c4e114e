"""Redis clients whose commands are packed by hiredis's C packer, as redis-py's synchronous clients' are.

redis-py's asyncio `Connection` packs every command in Python (`pack_command`: ~10 µs for the XADD of an
event, the relays' and the gate's ~20 appends per task), while its synchronous `Connection` hands the
same arguments to `hiredis.pack_command` whenever hiredis (a dependency) is installed
(`redis.connection.HiredisRespSerializer`): ~1.3 µs, the same bytes. `redis_client` is `Redis.from_url`
with that packer on the pool's connection class, whichever the URL chose (TCP, Unix socket, TLS);
without a usable hiredis it is `Redis.from_url` itself. Replies are parsed as before.
"""

from __future__ import annotations

import functools
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE


class HiredisPacking:
    """Mixin for an asyncio connection class: commands packed by hiredis (`pack_commands` packs each so too)."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        return self._packer.pack(*args)


@functools.cache
def hiredis_packed(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """`connection_class` packing commands with hiredis (itself when hiredis is missing or too old)."""
    if not HIREDIS_AVAILABLE:
        return connection_class
    return type(f"HiredisPacked{connection_class.__name__}", (HiredisPacking, connection_class), {})


def redis_client(url: str, **options: Any) -> Redis:
    """`Redis.from_url(url, **options)` whose connections pack commands with hiredis (module docstring)."""
    client = Redis.from_url(url, **options)
    pool = client.connection_pool  # no connection made yet: each is made when first needed
    pool.connection_class = hiredis_packed(pool.connection_class)
    return client
