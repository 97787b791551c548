"""The transfer's pure parts: the throughput cap's token bucket."""

from __future__ import annotations

from shardgrid.core.transfer import Throttle


def test_the_throttle_lets_its_rate_through_on_average():
    throttle = Throttle(1_000, at_ms=0)
    sent = 0
    for now_ms in range(0, 10_001, 10):  # ten seconds of ticks, a 300-byte chunk whenever allowed
        while throttle.allows(now_ms):
            throttle.spend(300)
            sent += 300
    assert 10_000 <= sent <= 11_000 + 300  # the rate, plus at most one second's burst and one chunk


def test_no_cap_lets_everything_through():
    throttle = Throttle(0)
    throttle.spend(10**9)
    assert throttle.allows(0)
