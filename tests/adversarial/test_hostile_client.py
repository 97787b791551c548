"""Hostile clients over raw sockets, after an honest CLIENT handshake."""

from __future__ import annotations

import contextlib
import socket
import struct
import time

import pytest

from shardgrid.client import Client
from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.config import MemberConfig
from shardgrid.core.hashing import partition_ids_of_serialized, serialize_key
from tests.wire import map_request

from .conftest import peak_rss_mb_while, rss_mb
from .raw import Raw, fake_member


def test_a_client_session_cannot_add_a_member(cluster):
    """``MemberProcess._deliver`` hands a CLIENT session's JoinRequest to the member as is (only
    member sessions are checked against the identity they proved), and ``Member._receive`` takes a
    JoinRequest from anyone: an anonymous client makes the leader add a phantom member at any
    address, and the cluster starts migrating partitions to it (until failure detection removes
    it again; the client can repeat)."""
    with Client(cluster.addresses[:1], operation_call_timeout_ms=10_000) as client:
        address = client.member_status().leader_address
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
        burst = b"".join(
            codec.encode(map_request(call_id=i + 1, kind=m.GET, map_name="amplify", keys=(key,))) for i in range(400)
        )
        peak = peak_rss_mb_while(process.pid, lambda: raw.send_bytes(burst), 8)
    finally:
        raw.close()
    assert process.poll() is None
    assert peak - before < 200, f"{len(burst)} bytes of requests grew the member from {before} MiB to {peak} MiB"


def _empty_commands_frame(target_bytes: int) -> bytes:
    """One AppendEntries frame of about ``target_bytes``, within every bound of the codec: entries
    of 10,000 empty commands (2 bytes each on the wire, a struct and two tuple slots each decoded:
    about 23 times the frame)."""
    commands = b"\xdc\x27\x10" + b"\x91\x45" * 10_000
    entries = [b"\x93\x01\xcd" + struct.pack(">H", i + 1) + commands for i in range(target_bytes // len(commands))]
    body = (
        b"\x92"
        + bytes([codec.PROTOCOL_VERSION])
        + b"\x97\x2a\x01\x00\x00\xdc"
        + struct.pack(">H", len(entries))
        + b"".join(entries)
        + b"\x00\x00"
    )
    return codec.LENGTH_PREFIX.pack(len(body)) + body


def _send_until_refused(raw: Raw, data: bytes) -> None:
    """Before the handshake the frame is refused from its length prefix: the member closes the
    connection while the rest is still being sent."""
    with contextlib.suppress(OSError):
        raw.send_bytes(data)


@pytest.mark.parametrize("handshake", [False, True], ids=["before-the-handshake", "after-a-client-handshake"])
def test_a_frame_a_connection_may_not_send_is_refused_before_it_is_decoded(cluster, handshake):
    """Found by an outside tester: a 16 MiB AppendEntries of empty commands (within every bound)
    made a member build about 385 MiB while the stream was framed, before anything asked who sent
    it; any connection could. An accepted connection now takes only the handshake until it proves
    who it is, then only a client's requests from a client: the frame closes it, undecoded."""
    address = cluster.addresses[0]
    process = cluster.processes[address]
    frame = _empty_commands_frame(15 * 1024 * 1024)
    raw = Raw(address)
    try:
        if handshake:
            raw.handshake()
        before = rss_mb(process.pid)
        peak = peak_rss_mb_while(process.pid, lambda: _send_until_refused(raw, frame), 3)
        assert raw.closed_by_peer(), "the member kept the connection after a frame it may not take"
    finally:
        raw.close()
    assert process.poll() is None
    assert peak - before < 100, f"a {len(frame) >> 20} MiB frame grew the member from {before} MiB to {peak} MiB"
    with Client([address], operation_call_timeout_ms=10_000) as client:
        assert client.member_status().leader_address  # still serving
