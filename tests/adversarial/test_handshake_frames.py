"""Found by an outside tester: a connection still shaking hands could send (or answer with) a frame
of any kind and any size, decoded before anything asked who it was. A 16 MiB AppendEntries of empty
commands becomes about 385 MiB once decoded; a partial 16 MiB frame was held whole per connection.
Until its handshake is done a connection now takes only the handshake's messages, in frames of at
most MAX_HANDSHAKE_FRAME_BYTES, both ways: a member's accepted and dialed connections and a
client's."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import tracemalloc

import pytest

from shardgrid.client import Client
from shardgrid.client.errors import ShardgridClientError
from shardgrid.core import codec
from tests.runtime.local_cluster import LocalCluster, free_ports

from .conftest import rss_mb
from .raw import Raw
from .test_hostile_client import _empty_commands_frame


class BombServer:
    """Listens at ``port`` and answers every connection with ``frame``, reading what it is sent."""

    def __init__(self, port: int, frame: bytes) -> None:
        self.frame = frame
        self.accepted = 0
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.sendall(self.frame)
                while conn.recv(1 << 16):
                    pass
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(timeout=5)


def test_connections_shaking_hands_cannot_make_a_member_hold_big_frames(cluster):
    """24 connections, each the length prefix of a 15 MiB frame and 1 MiB of it: each is refused
    from its prefix (64 held them all, 1 GiB, until the handshake timeout)."""
    address = cluster.addresses[1]
    process = cluster.processes[address]
    before = rss_mb(process.pid)
    peers = [Raw(address) for _ in range(24)]
    peak = before
    try:
        for peer in peers:
            peer.send_bytes(codec.LENGTH_PREFIX.pack(15 << 20))
            with contextlib.suppress(OSError):  # refused already
                peer.send_bytes(bytes(1 << 20))
            peak = max(peak, rss_mb(process.pid))
        assert all(peer.closed_by_peer(timeout_s=5) for peer in peers)
    finally:
        for peer in peers:
            peer.close()
    assert process.poll() is None
    assert peak - before < 60, f"24 connections grew the member from {before} MiB to {peak} MiB"


def test_a_member_that_dials_a_stranger_does_not_decode_its_frames(tmp_path):
    """A member's address taken over (here: killed, its port then bound by a stranger): the others
    dial it again and again; each answer of a 14 MiB frame of empty commands took them to ~414 MiB
    and ~10 s of CPU, and a client's puts through them stalled."""
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        victim = running.addresses[2]
        running.kill(victim)
        server = BombServer(int(victim.rpartition(":")[2]), _empty_commands_frame(14 << 20))
        try:
            survivors = running.addresses[:2]
            before = {a: rss_mb(running.processes[a].pid) for a in survivors}
            peak = dict(before)
            written = 0
            with Client(survivors, operation_call_timeout_ms=10_000) as client:
                data = client.get_map("beside-a-stranger")
                deadline = time.monotonic() + 8
                while time.monotonic() < deadline:
                    data.set(f"k{written}", written)
                    written += 1
                    for a in survivors:
                        peak[a] = max(peak[a], rss_mb(running.processes[a].pid))
            assert server.accepted > 0, "nobody dialed the stranger: the test tested nothing"
        finally:
            server.close()
        for a in survivors:
            assert running.processes[a].poll() is None
            assert peak[a] - before[a] < 100, f"{a} grew from {before[a]} MiB to {peak[a]} MiB"
        assert written > 100, f"only {written} puts in 8 s beside the stranger"


def test_a_client_does_not_decode_a_strangers_frames():
    """A client pointed at an address where a stranger answers with a 14 MiB frame of empty
    commands grew by ~370 MiB before it refused the stranger."""
    port = free_ports(1)[0]
    server = BombServer(port, _empty_commands_frame(14 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(ShardgridClientError):
            Client([f"127.0.0.1:{port}"], operation_call_timeout_ms=3_000, connect_timeout_ms=3_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.close()
    assert server.accepted > 0
    assert peak < 20 << 20, f"the client peaked at {peak >> 20} MiB"
