"""Found by an outside tester: once its handshake is done, each client connection could hold one
part-read frame of up to max_frame_bytes while it trickled in, so a client that began large frames
on many connections and never ended them grew a member by that much per connection (6 connections:
39 to 123 MiB; 4,096 client connections are allowed). Part-read client frames now share one
process-wide budget (client_frame_budget_bytes): a connection whose frame does not fit stops being
read until one ends, and a claimed frame not whole after frame_timeout_ms of reading closes its
connection. An honest client's large request waits its turn and is served."""

from __future__ import annotations

import contextlib
import struct
import threading
import time

import pytest

from shardgrid.client import Client
from shardgrid.core.limits import MAX_KEY_BYTES, MAX_VALUE_BYTES
from tests.runtime.local_cluster import LocalCluster

from .conftest import rss_mb
from .raw import Raw

MIB = 1024 * 1024
FRAME_BYTES = MAX_KEY_BYTES + MAX_VALUE_BYTES + 128 * 1024  # the smallest max_frame_bytes allowed, and a bit
HOLDERS = 12


@pytest.fixture(scope="module")
def member(tmp_path_factory):
    settings = (
        "--set",
        f"max_frame_bytes={FRAME_BYTES}",
        "--set",
        f"client_frame_budget_bytes={2 * FRAME_BYTES}",
        "--set",
        "frame_timeout_ms=1000",
    )
    with LocalCluster(tmp_path_factory.mktemp("budget"), 1, *settings) as running:
        running.wait_formed()
        yield running


def _hold(raw: Raw, sent: list[int]) -> None:
    """Begins a frame of FRAME_BYTES and sends all of it but its last byte (as far as the member
    reads), then waits."""
    body_bytes = FRAME_BYTES - 4
    data = struct.pack(">I", body_bytes) + b"\x00" * (body_bytes - 1)
    with contextlib.suppress(OSError):
        raw.sock.settimeout(60)
        raw.sock.sendall(data)
        sent.append(len(data))


def test_part_read_client_frames_stay_within_the_budget_and_an_honest_client_is_served(member):
    address = member.addresses[0]
    process = member.processes[address]
    before = rss_mb(process.pid)
    holders = [Raw(address) for _ in range(HOLDERS)]
    sent: list[int] = []
    try:
        for raw in holders:
            raw.handshake()
        threads = [threading.Thread(target=_hold, args=(raw, sent), daemon=True) for raw in holders]
        for thread in threads:
            thread.start()
        peak = before
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            peak = max(peak, rss_mb(process.pid))
            time.sleep(0.1)
        # Unbounded, the member read all but a byte of each frame: 12 x 4.2 MiB.
        assert peak - before < 30, f"{HOLDERS} part-read frames grew the member from {before} to {peak} MiB"
        value = b"v" * (3 * MIB)  # a frame over the budget's threshold: claimed, waits its turn
        started = time.monotonic()
        with Client([address], operation_call_timeout_ms=30_000) as client:
            client.get_map("budget").set("big", value)
            assert client.get_map("budget").get("big") == value
        waited_s = time.monotonic() - started
        for thread in threads:
            thread.join(timeout=30)
        closed = sum(raw.closed_by_peer(timeout_s=5) for raw in holders)
        assert closed == HOLDERS, f"only {closed} of {HOLDERS} connections holding a frame were closed"
        assert process.poll() is None
        log = member.log_text(address)
        assert f"a frame of {FRAME_BYTES} bytes was not whole after 1000 ms of reading" in log
        assert waited_s < 25
    finally:
        for raw in holders:
            raw.close()
