"""Eviction on real members: three members at a small max_memory_bytes with an LRU map and a map
that evicts nothing. The cache takes every write, evicting within its size; the store takes what
the cache yields, then refuses; a member is killed (SIGKILL) while they are full, and every
acknowledged store write is still read back, the cache still within its size."""

from __future__ import annotations

import time

from shardgrid.client import Client, MemoryFullError
from tests.runtime.local_cluster import LocalCluster

LIMIT_BYTES = 3_000_000
PARTITIONS = 13
CACHE_ENTRIES_PER_MEMBER = 300
VALUE = b"v" * 1_000


def test_a_cache_evicts_a_store_refuses_and_a_kill_while_full_loses_no_acknowledged_write(tmp_path):
    settings = tmp_path / "members.toml"
    settings.write_text(
        f"[cluster]\nmax_memory_bytes = {LIMIT_BYTES}\npartition_count = {PARTITIONS}\nbackup_count = 1\n\n"
        f'[maps.cache]\neviction_policy = "LRU"\nmax_entries_per_member = {CACHE_ENTRIES_PER_MEMBER}\n\n'
        "[maps.store]\n"
    )
    with LocalCluster(tmp_path, 3, "--config", str(settings)) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=30_000) as client:
            client.wait_until_safe(60)
            cache, store = client.get_map("cache"), client.get_map("store")
            for batch in range(20):  # 10,000 entries offered to a cache of about 900
                cache.put_all({f"c{batch}-{i}": VALUE for i in range(500)})
            # Each partition holds its share of the per-member size: 300 x 3 members / 13, rounded up.
            share = -(-CACHE_ENTRIES_PER_MEMBER * 3 // PARTITIONS)
            assert cache.size() <= share * PARTITIONS
            acknowledged: list[str] = []
            refused = 0
            for batch in range(60):  # 6 MB offered to members holding 3 MB each, with one backup
                keys = [f"s{batch}-{i}" for i in range(100)]
                try:
                    store.put_all(dict.fromkeys(keys, VALUE))
                    acknowledged += keys
                except MemoryFullError:
                    refused += 1
            assert refused, "the store took 6 MB past a limit of 3 MB a member"
            assert acknowledged, "the store took nothing of what the cache yielded"
            evicted = sum(client.member_status(address).entries_evicted for address in running.addresses)
            assert evicted >= 10_000 - share * PARTITIONS
            running.kill(running.addresses[0])
            survivor = running.addresses[1]
            running.wait_for_log(survivor, f"member-removed member={running.addresses[0]}", timeout_s=60)
            deadline = time.monotonic() + 60
            while True:  # reads retry through the promotions
                held = store.get_all(acknowledged)
                if len(held) == len(acknowledged) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert held == dict.fromkeys(acknowledged, VALUE)
            assert cache.size() <= share * PARTITIONS
