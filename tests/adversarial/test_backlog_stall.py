"""A frame over write_high_water_bytes (4 MiB by default) leaves a FrameStream 'over high water'
for good when the transport drains without ever having called pause_writing() (the socket took
part of the frame at once and the rest stayed under the transport's high mark). Nothing calls
``_check_backlog`` again, so:

- client side: ``MemberConnection._writable`` stays cleared: every later call to that member waits
  forever for a slot to write, and times out; the connection is never closed, so the client never
  recovers;
- member side: the member paused reading the client's connection and never resumes it: the next
  request on that connection is never read (a map's ``values()``/``entries()`` over a partition
  holding more than 4 MiB hangs until the call timeout, every time).
"""

from __future__ import annotations

import time

import pytest

from shardgrid.client import Client, OperationTimeoutError
from shardgrid.core import messages as m
from shardgrid.core.hashing import partition_ids_of_serialized, serialize_key

from .raw import Raw

MIB = 1024 * 1024


def keys_in(pid: int, count: int, prefix: str, partitions: int = 271) -> list[str]:
    found, i = [], 0
    while len(found) < count:
        key = f"{prefix}{i}"
        i += 1
        if partition_ids_of_serialized([serialize_key(key)], partitions)[0] == pid:
            found.append(key)
    return found


def test_a_client_connection_goes_on_after_a_request_over_high_water(cluster):
    with Client(cluster.addresses[:1], operation_call_timeout_ms=4_000, attempt_timeout_ms=2_000) as client:
        data = client.get_map("stall-client")
        keys = keys_in(20, 2, "p")  # one owner: one 6 MiB request
        failures = []
        for round_ in range(4):
            try:
                data.put_all({key: bytes([round_]) * (3 * MIB) for key in keys})
                assert len(data.get_all(keys)) == 2
            except OperationTimeoutError as error:
                failures.append((round_, str(error)))
        stuck = [
            address
            for address, connection in client.async_client._connections.items()
            if not connection.closed and not connection._writable.is_set()
        ]
        # Expected: every round succeeds (the member is healthy and idle).
        assert failures == [], f"failed rounds: {failures}"
        assert stuck == [], f"stuck connections: {stuck}"


def test_a_member_goes_on_reading_a_client_after_a_reply_over_high_water(cluster):
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        data = client.get_map("stall-member")
        for key in keys_in(7, 3, "big"):
            data.set(key, b"x" * (3 * MIB))
        owner = client.async_client.table.owners[7]
    raw = Raw(owner)
    try:
        raw.handshake()
        raw.send(
            m.ScanRequest(
                call_id=1, map_name="stall-member", partition_id=7, offset=0, max_entries=10_000, keys_only=False
            )
        )
        first = raw.recv_one(15)
        assert first.code is m.ReplyCode.OK
        assert len(first.values) == 2
        raw.send(
            m.ScanRequest(
                call_id=2, map_name="stall-member", partition_id=7, offset=0, max_entries=10_000, keys_only=True
            )
        )
        try:
            second = raw.recv_one(10)
        except TimeoutError:
            pytest.fail("the member never read the next request on this connection (reading paused for good)")
        assert second.call_id == 2
    finally:
        raw.close()


def test_values_of_a_map_with_a_big_partition_complete(cluster):
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        data = client.get_map("stall-values")
        for key in keys_in(9, 3, "v"):
            data.set(key, b"v" * (3 * MIB))
        started = time.monotonic()
        try:
            values = data.values()
        except OperationTimeoutError as error:
            pytest.fail(f"values() of 3 entries timed out after {time.monotonic() - started:.1f} s: {error}")
        assert len(values) == 3
