"""One GET naming a key many times makes the member queue that many copies of its value.

The first round's fix (tests/adversarial/test_hostile_client.py) defers the *rest of a read*
while a client's answers pile up, so pipelining many small GETs no longer amplifies. But a single
MapRequest may name up to 10,000 keys, and nothing stops it naming the same key again and again:
the member answers every position (core/member/data.py ``_read_into``) and ``_reply`` splits the
answer into 8 MiB parts, all sent into the client's stream at once, whatever its high-water
mark. 4 KB of request (400 x one 1 MiB key) queue 400 MiB in the member for a client that does
not read; 10,000 x a 4 MiB value (~600 KB of request) would queue ~40 GiB (the member is
OOM-killed, taking its partitions with it).

Expected: the member's memory for one client stays bounded (around write_high_water_bytes), e.g.
by refusing duplicate keys in one request or by producing the parts only as the stream drains.
"""

from __future__ import annotations

import socket

from shardgrid.client import Client
from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.hashing import serialize_key
from tests.adversarial.conftest import peak_rss_mb_while, rss_mb
from tests.adversarial.raw import Raw
from tests.runtime.local_cluster import LocalCluster
from tests.wire import map_request

COPIES = 400


def test_one_get_of_one_key_many_times_keeps_the_member_bounded(tmp_path):
    with LocalCluster(tmp_path, 1, "--partition-count", "7", "--backup-count", "0") as running:
        running.wait_formed()
        address = running.addresses[0]
        with Client([address], operation_call_timeout_ms=10_000) as client:
            client.get_map("amplify").set("blob", b"x" * (1024 * 1024))
        key = serialize_key("blob")
        process = running.processes[address]
        before = peak = rss_mb(process.pid)
        raw = Raw(address)
        try:
            raw.handshake()
            raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            request = codec.encode(map_request(call_id=1, kind=m.GET, map_name="amplify", keys=(key,) * COPIES))
            peak = peak_rss_mb_while(process.pid, lambda: raw.send_bytes(request), 6)
        finally:
            raw.close()
        assert process.poll() is None
        assert peak - before < 200, (
            f"one request of {len(request)} bytes grew the member from {before} MiB to {peak} MiB"
        )
