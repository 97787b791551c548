"""The migration throughput cap against the leader's transfer backstop.

A member capped by ``max_migration_bytes_per_s`` sends a partition at most that fast, and the
README says "a migration waiting for the cap is not counted as stalled". But the leader rolls back
any migration still in its TRANSFER stage ``TRANSFER_BACKSTOP_TIMEOUTS`` (3) x
``migration_timeout_ms`` after it started (core/member/migration_leader.py ``_retry``), whatever
progress it makes. A partition that takes longer than that at the cap (big, or sharing the
source's cap with other migrations) is rolled back, planned again, rolled back again: the
rebalance never finishes, though every setting passed validation.

Scaled down so the test is short: migration_timeout_ms=2000 (backstop 6 s), chunks of 64 KiB and a
cap of 64 KiB/s (the smallest validation allows: two chunks within migration_timeout_ms); 7
partitions of ~600 KB each. The same happens with the defaults (30 s, 1 MiB chunks) at 1 MB/s
and 10 parallel migrations once partitions hold more than ~9 MB.
"""

from __future__ import annotations

import time

from shardgrid.client import Client, OperationTimeoutError
from tests.runtime.local_cluster import LocalCluster

CAP = 65_536
SETTINGS = (
    "--partition-count",
    "7",
    "--set",
    f"max_migration_bytes_per_s={CAP}",
    "--set",
    "migration_timeout_ms=2000",
    "--set",
    f"max_chunk_bytes={CAP}",
)


def test_a_capped_rebalance_finishes(tmp_path):
    with LocalCluster(tmp_path, 2, *SETTINGS) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=60_000) as client:
            data = client.get_map("data")
            entries = {f"k{i}": "v" * 1000 for i in range(4_000)}  # ~4 MB: ~600 KB a partition
            data.put_all(entries)
            client.wait_until_safe(60)
            events = []
            listener = client.add_migration_listener(events.append)
            deadline = time.monotonic() + 10
            while not listener.subscribed.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            joiner = running.start(join=running.addresses, initial=2)
            running.wait_for_log(joiner, "member-added", timeout_s=60)
            started = time.monotonic()
            while not [e for e in events if e.phase == "started"] and time.monotonic() - started < 20:
                time.sleep(0.1)
            # Expected: done in roughly (bytes to move) / (2 sources x CAP): 4 MB x 2 copies x ~1/3
            # moved / 128 KB/s is ~25 s; give it 3x that.
            safe = True
            try:
                client.wait_until_safe(75)
            except OperationTimeoutError as error:
                safe = False
                reason = str(error)
            failed = [e for e in events if e.phase not in ("started", "finished")]
            finished = [e for e in events if e.phase == "finished"]
            assert safe, (
                f"a capped rebalance never finished: {reason}; {len(failed)} migrations failed "
                f"({sorted({e.detail for e in failed})[:3]}), {len(finished)} finished"
            )
            assert not failed, f"{len(failed)} capped migrations failed: {sorted({e.detail for e in failed})[:3]}"
            assert data.get_all(list(entries)) == entries
            assert client.cluster_status().replies[joiner].owned_partitions > 0
