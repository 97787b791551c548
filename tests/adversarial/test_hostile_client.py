"""Hostile clients over raw sockets, after an honest CLIENT handshake."""

from __future__ import annotations

import socket
import time

from shardgrid.client import Client
from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.config import MemberConfig
from shardgrid.core.hashing import partition_ids_of_serialized, serialize_key

from .conftest import peak_rss_mb_while, rss_mb
from .raw import Raw, fake_member


def test_a_client_session_cannot_add_a_member(cluster):
    """``MemberProcess._deliver`` hands a CLIENT session's JoinRequest to the member as is (only
    member sessions are checked against the identity they proved), and ``Member._receive`` takes a
    JoinRequest from anyone: an anonymous client makes the master add a phantom member at any
    address, and the cluster starts migrating partitions to it (until failure detection removes
    it again; the client can repeat)."""
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        address = client.member_status().master_address
    raw = Raw(address)
    try:
        raw.handshake()
        raw.send(m.JoinRequest(fake_member("127.0.0.1:1"), False, True, MemberConfig().settings_digest))
        time.sleep(3)
    finally:
        raw.close()
    with Client([address], operation_call_timeout_ms=10_000) as client:
        members = client.cluster_status().members
    added = [
        line
        for text in map(cluster.log_text, cluster.addresses)
        for line in text.splitlines()
        if "member-added member=127.0.0.1:1/" in line
    ]
    assert "127.0.0.1:1" not in members, f"a client added a member: {members}"
    assert added == [], f"a client added a member: {added[:1]}"


def test_pipelined_reads_of_a_big_value_keep_the_member_bounded(cluster):
    """A client that pipelines small GETs of a large value and does not read: the member pauses
    reading it only after the whole chunk it already read is answered, so 1 request byte becomes
    ~30,000 bytes of queued replies. 13 KB of requests (400 GETs of a 1 MiB value) queue 400 MiB;
    a 256 KiB burst of GETs of a 4 MiB value would queue ~30 GiB (the member is OOM-killed).
    Expected: the member's memory for one client stays around its write_high_water_bytes."""
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        client.get_map("amplify").set("blob", b"x" * (1024 * 1024))
    key = serialize_key("blob")
    pid = partition_ids_of_serialized([key], 271)[0]
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        owner = client.async_client.table.owners[pid]
    process = cluster.processes[owner]
    before = rss_mb(process.pid)
    raw = Raw(owner)
    peak = before
    try:
        raw.handshake()
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        burst = b"".join(codec.encode(m.MapRequest(i + 1, m.GET, "amplify", (pid,), (key,))) for i in range(400))
        peak = peak_rss_mb_while(process.pid, lambda: raw.send_bytes(burst), 8)
    finally:
        raw.close()
    assert process.poll() is None
    assert peak - before < 200, f"{len(burst)} bytes of requests grew the member from {before} MiB to {peak} MiB"
