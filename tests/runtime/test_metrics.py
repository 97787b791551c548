"""The Prometheus endpoint of a member process: operations and latencies per map, partitions,
connections, as a scraper reads them."""

from __future__ import annotations

import time
import urllib.request

from shardgrid.client import Client

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
    metrics.on_reply("users", "put", m.MapReply(call_id=1, codes=(ok,) * 3), 0.001)
    metrics.on_reply("users", "put", m.MapReply(call_id=2, codes=(ok, moved, ok, moved, moved)), 0.001)
    metrics.on_reply("users", "put", m.MapReply(call_id=3, codes=(moved,)), 0.001)
    metrics.on_reply("users", "get", m.MapReply(call_id=4, codes=()), 0.001)

    def count(code: str, op: str = "put") -> float | None:
        return metrics.registry.get_sample_value(
            "shardgrid_map_operations_total", {"map": "users", "op": op, "code": code}
        )

    assert count("ok") == 5
    assert count("wrong_owner") == 4
    assert count("ok", "get") is None
