"""A real member with a small max_memory_bytes: clients that keep writing get MemoryFullError
naming the member and its limit, nothing they were refused is stored, reads and removes go on,
the status shows the engine's count against the limit, and writes are taken again after removes."""

from __future__ import annotations

import time

from shardgrid.client import Client, MemoryFullError
from tests.runtime.local_cluster import LocalCluster

LIMIT_BYTES = 2_000_000
VALUE = b"v" * 1_000


def test_a_full_member_refuses_writes_serves_reads_and_removes_and_recovers(tmp_path):
    settings = ("--partition-count", "7", "--backup-count", "0", "--set", f"max_memory_bytes={LIMIT_BYTES}")
    with LocalCluster(tmp_path, 1, *settings) as running:
        running.wait_formed()
        address = running.addresses[0]
        with Client(running.addresses, operation_call_timeout_ms=10_000) as client:
            data = client.get_map("data")
            written: list[str] = []
            refused: MemoryFullError | None = None
            for batch in range(200):  # 20 MB offered: ten times the limit
                keys = [f"k{batch}-{i}" for i in range(100)]
                try:
                    data.put_all(dict.fromkeys(keys, VALUE))
                except MemoryFullError as error:
                    refused = error
                    break
                written += keys
            assert refused is not None, "20 MB were taken under a limit of 2 MB"
            assert address in str(refused)
            assert f"max_memory_bytes of {LIMIT_BYTES}" in str(refused)
            assert written, "the member refused its first write"
            held = data.get_all(written)
            assert held == dict.fromkeys(written, VALUE)  # every acknowledged write is there
            # Of the batch refused, the member took some keys before it was full (a put_all is not
            # atomic across partitions): at most that batch more.
            stored = data.size()
            assert len(written) <= stored < len(written) + 100
            assert stored <= LIMIT_BYTES // len(VALUE)
            member = client.member_status(address)
            deadline = time.monotonic() + 5
            while member.entries < stored and time.monotonic() < deadline:  # counted once a tick
                time.sleep(0.1)
                member = client.member_status(address)
            assert member.entries == stored
            assert stored * len(VALUE) < member.memory_bytes <= LIMIT_BYTES
            assert member.max_memory_bytes == LIMIT_BYTES
            data.remove_all(written[: len(written) // 2])
            deadline = time.monotonic() + 10
            while True:  # the member counts its records again at its next tick
                try:
                    data.put_all({f"again-{i}": VALUE for i in range(100)})
                    break
                except MemoryFullError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            assert data.get("again-0") == VALUE
