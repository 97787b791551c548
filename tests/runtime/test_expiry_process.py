"""TTL on real members: an entry written with a ttl is read until it expires and never after, a
map's time_to_live_seconds applies to writes without their own, and the owner's removals reach the
backup (after a crash of the owner, the promoted backup holds none of the expired entries)."""

from __future__ import annotations

import time

import pytest

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster


def test_entries_expire_on_real_members_and_their_removal_is_replicated(tmp_path):
    (tmp_path / "settings.toml").write_text("[maps.cache]\ntime_to_live_seconds = 1\n")
    settings = ("--partition-count", "7", "--config", str(tmp_path / "settings.toml"))
    with LocalCluster(tmp_path, 2, *settings) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=10_000) as client:
            client.wait_until_safe(30)
            data = client.get_map("data")
            cache = client.get_map("cache")
            data.put("short", "s", ttl=0.5)
            data.put_all({f"k{i}": i for i in range(200)}, ttl=1)
            data.set("forever", "f")
            cache.put("default", "d")
            cache.put("kept", "k", ttl=0)
            assert data.get("short") == "s"
            assert cache.get("default") == "d"
            time.sleep(1.3)
            assert data.get("short") is None
            assert data.get_all([f"k{i}" for i in range(200)]) == {}
            assert data.get("forever") == "f"
            assert cache.get("default") is None
            assert cache.get("kept") == "k"
            assert data.put_if_absent("short", "again") is None  # an expired entry is no value
            # The owners' removals are replicated: once settled, neither copy holds the expired.
            deadline = time.monotonic() + 10
            while data.size() != 2 and time.monotonic() < deadline:  # "forever", "short" (again)
                time.sleep(0.2)
            assert data.size() == 2
            assert cache.size() == 1
            with pytest.raises(ValueError, match="ttl"):
                data.put("bad", "x", ttl=-1)
