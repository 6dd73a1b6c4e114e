"""`shared.delivery.redis_packing`: commands packed by hiredis are the bytes redis-py's Python packer
makes, for whatever a command may carry, and every URL scheme's connection class packs so."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from shared.delivery.redis_packing import HiredisPacking, redis_client

PYTHON_PACKER = Connection()
ARGUMENTS = st.one_of(st.text(), st.binary(), st.integers(), st.floats(allow_nan=False))


def packed(connection: Connection, *args: object) -> bytes:
    return b"".join(connection.pack_commands([args]))


@given(st.sampled_from(["XADD", "XACK", "CONFIG GET", "SET"]), st.lists(ARGUMENTS, max_size=12))
def test_the_bytes_are_python_packers(command: str, args: list[object]) -> None:
    connection = redis_client("redis://localhost:6379/0").connection_pool.make_connection()
    assert packed(connection, command, *args) == packed(PYTHON_PACKER, command, *args)


def test_an_event_append_is_the_same_command() -> None:
    connection = redis_client("redis://localhost:6379/0").connection_pool.make_connection()
    fields = ["event_id", "01M91XSTPBGJ3HK3KF9CQVM73J", "type", "lease.granted", "event", '{"a":"é\u2028😀"}' * 200]
    assert packed(connection, "XADD", "cf:events", "MAXLEN", "~", 100000, "*", *fields) == packed(
        PYTHON_PACKER, "XADD", "cf:events", "MAXLEN", "~", 100000, "*", *fields)  # fmt: skip


@pytest.mark.parametrize("value", [None, True, object()])
def test_what_redis_py_refuses_is_refused(value: object) -> None:
    connection = redis_client("redis://localhost:6379/0").connection_pool.make_connection()
    with pytest.raises(DataError):
        packed(PYTHON_PACKER, "SET", "k", value)
    with pytest.raises(DataError):
        packed(connection, "SET", "k", value)


@pytest.mark.parametrize(
    ("url", "base"),
    [("redis://localhost:6379/0", Connection), ("unix:///tmp/redis.sock", UnixDomainSocketConnection),
     ("rediss://localhost:6380/0", SSLConnection)],
)  # fmt: skip
def test_each_scheme_keeps_its_connection_class_and_packs_with_hiredis(url: str, base: type) -> None:
    connection_class = redis_client(url, socket_timeout=3).connection_pool.connection_class
    assert issubclass(connection_class, base) and issubclass(connection_class, HiredisPacking)
