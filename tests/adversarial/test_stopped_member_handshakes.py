"""A member that stops (SIGSTOP, a stalled VM, a long pause of its loop) past the handshake timeout
judged its connections on the first housekeeping tick after it went on, before it read what had
come in meanwhile: every connection that was shaking hands when it stopped was refused, though its
next message was waiting. Connections are now judged as of the tick before: the reads that waited
behind a late tick are done first, and a member late on every tick still closes silent connections
(skipping late ticks instead left them open for as long as the member stayed busy: found by an
outside tester)."""

from __future__ import annotations

import signal
import time

import pytest

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster

from .raw import Raw

HANDSHAKE_TIMEOUT_MS = 400


@pytest.fixture(scope="module")
def member(tmp_path_factory):
    with LocalCluster(
        tmp_path_factory.mktemp("stopped"), 1, "--set", f"handshake_timeout_ms={HANDSHAKE_TIMEOUT_MS}"
    ) as running:
        running.wait_formed()
        yield running


def _accepted(address: str) -> Raw:
    """A connection the member has accepted (its handshake deadline runs), that has said nothing."""
    raw = Raw(address)
    time.sleep(0.1)
    return raw


def test_a_handshake_begun_before_the_member_stopped_past_its_timeout_is_finished(member):
    address = member.addresses[0]
    process = member.processes[address]
    shaking = _accepted(address)
    process.send_signal(signal.SIGSTOP)
    try:
        shaking.send(shaking.hello)  # waits in the member's socket while it is stopped
        time.sleep(3 * HANDSHAKE_TIMEOUT_MS / 1000)
    finally:
        process.send_signal(signal.SIGCONT)
    shaking.handshake(hello_sent=True)
    assert shaking.session.established
    shaking.close()
    # A connection that says nothing is still closed at its timeout.
    silent = Raw(address)
    started = time.monotonic()
    assert silent.closed_by_peer(timeout_s=10)
    assert time.monotonic() - started < 5
    assert "no handshake within" in member.log_text(address)
    with Client([address]) as client:
        client.get_map("after-stop").set("k", "v")
        assert client.get_map("after-stop").get("k") == "v"


def test_a_member_late_on_every_tick_still_closes_a_silent_connection(member):
    address = member.addresses[0]
    process = member.processes[address]
    refusals = member.log_text(address).count("no handshake within")
    silent = _accepted(address)
    closed = False
    for _ in range(12):  # each tick comes 600 ms after the last: every one is late
        process.send_signal(signal.SIGSTOP)
        time.sleep(0.6)
        process.send_signal(signal.SIGCONT)
        if silent.closed_by_peer(timeout_s=0.05):
            closed = True
            break
    assert closed, "a silent connection stayed open while every housekeeping tick came late"
    assert member.log_text(address).count("no handshake within") > refusals
