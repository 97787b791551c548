"""The Prometheus endpoint of a member process: operations and latencies per map, partitions,
connections, as a scraper reads them."""

from __future__ import annotations

import time
import urllib.request

from shardgrid.client import Client
from tests.wire import map_reply

from .local_cluster import LocalCluster, free_ports


def _scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_a_member_serves_its_metrics(tmp_path):
    (metrics_port,) = free_ports(1)
    with LocalCluster(tmp_path, 1, "--metrics-port", str(metrics_port)) as running:
        address = running.addresses[0]
        running.wait_for_log(address, "leader-changed")
        with Client([address], operation_call_timeout_ms=30_000) as client:
            users = client.get_map("users")
            users.put_all({f"k{i}": i for i in range(500)})
            users.get("k1")
            users.get("missing")
        deadline = time.monotonic() + 10
        while True:  # the gauges are read once a second
            samples = _scrape(metrics_port)
            if samples.get("shardgrid_partitions_owned") == 271 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert samples['shardgrid_map_operations_total{code="ok",map="users",op="put"}'] == 500
        assert samples['shardgrid_map_operations_total{code="ok",map="users",op="get"}'] == 2
        assert samples['shardgrid_map_request_seconds_count{map="users",op="get"}'] == 2
        assert samples["shardgrid_partitions_owned"] == 271
        assert samples['shardgrid_connections{kind="client"}'] >= 0
        assert samples["shardgrid_client_frame_bytes_claimed"] == 0  # nothing part-read now
        assert samples["shardgrid_client_frames_waiting"] == 0


def test_operations_are_counted_by_reply_code():
    from shardgrid.core import messages as m
    from shardgrid.runtime.metrics import MemberMetrics

    metrics = MemberMetrics()
    ok, moved = m.ReplyCode.OK, m.ReplyCode.WRONG_OWNER
    metrics.on_reply("users", "put", map_reply(call_id=1, codes=(ok,) * 3), 0.001)
    metrics.on_reply("users", "put", map_reply(call_id=2, codes=(ok, moved, ok, moved, moved)), 0.001)
    metrics.on_reply("users", "put", map_reply(call_id=3, codes=(moved,)), 0.001)
    metrics.on_reply("users", "get", map_reply(call_id=4, codes=()), 0.001)

    def count(code: str, op: str = "put") -> float | None:
        return metrics.registry.get_sample_value(
            "shardgrid_map_operations_total", {"map": "users", "op": op, "code": code}
        )

    assert count("ok") == 5
    assert count("wrong_owner") == 4
    assert count("ok", "get") is None


def test_each_maps_records_and_the_evictions_are_gauged_from_the_status():
    from shardgrid.core import messages as m
    from shardgrid.runtime.metrics import MemberMetrics

    metrics = MemberMetrics()

    def status(evicted: int, *usage: m.MapUsage) -> m.MemberStatus:
        return m.MemberStatus(
            call_id=1, address="a:1", uuid="u", lifecycle="active", lite=False, leader_address="", term=1,
            cluster_state=m.ClusterState.ACTIVE, applied_index=1, members=(), lite_members=(), leaving_members=(),
            partition_count=1, table_stamp=None, owned_partitions=0, backup_replicas=0, missing_replicas=0,
            migrations_in_log=0, migrations_here=0, migrations_planned=0, migrations_finished=0,
            writes_awaiting_backups=0, syncs_in_flight=0, leader_idle=True, quiet=True,
            entries_evicted=evicted, maps=usage,
        )  # fmt: skip

    def sample(name: str, map_name: str | None = None) -> float | None:
        return metrics.registry.get_sample_value(name, {"map": map_name} if map_name else {})

    metrics.on_status(status(5, m.MapUsage(map_name="a", entries=3, memory_bytes=900)))
    metrics.on_status(status(12, m.MapUsage(map_name="b", entries=1, memory_bytes=100)))
    assert sample("shardgrid_entries_evicted_total") == 12
    assert sample("shardgrid_map_entries", "b") == 1
    assert sample("shardgrid_map_memory_bytes", "b") == 100
    assert sample("shardgrid_map_entries", "a") is None  # no longer held: no series
