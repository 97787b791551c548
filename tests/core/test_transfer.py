"""The transfer's pure parts: the throughput cap's token bucket, and the receiver's staging."""

from __future__ import annotations

from shardgrid.core.messages import TransferChunk, TransferKind
from shardgrid.core.records import RESERVED_RECORD_BYTES, page_of
from shardgrid.core.transfer import Staging, Throttle


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


def _chunk(sequence: int, keys: range, *, map_entries: int, last: bool) -> TransferChunk:
    return TransferChunk(
        kind=TransferKind.SYNC,
        transfer_id="t",
        partition_id=0,
        sequence=sequence,
        map_name="m",
        records=page_of([b"%d" % i for i in keys], [b"v"] * len(keys)),
        last=last,
        replica_sequence=len(keys),
        lineage="L",
        map_entries=map_entries,
    )


def test_a_receiver_makes_room_once_for_what_its_sender_says_comes_and_only_when_it_fits():
    asked: list[int] = []

    def fits(growth_bytes: int) -> bool:
        asked.append(growth_bytes)
        return True

    staging = Staging(fits=fits)
    staging.receive(_chunk(0, range(0, 10), map_entries=30, last=False), window=4)
    staging.receive(_chunk(1, range(10, 20), map_entries=30, last=False), window=4)
    staging.receive(_chunk(2, range(20, 30), map_entries=30, last=True), window=4)
    assert asked == [20 * RESERVED_RECORD_BYTES]  # after the first page, for the rest, once
    assert len(staging.maps["m"]) == 30
    # The records, their order and their count are what they would be without the room made.
    unsized = Staging()
    for sequence, first in enumerate(range(0, 30, 10)):
        unsized.receive(_chunk(sequence, range(first, first + 10), map_entries=30, last=first == 20), window=4)
    assert list(staging.maps["m"].entries()) == list(unsized.maps["m"].entries())
    assert staging.maps["m"].memory_bytes() == unsized.maps["m"].memory_bytes()


def test_room_a_sender_overstated_is_given_back_when_the_transfer_is_whole_and_a_refusal_is_no_error():
    staging = Staging(fits=lambda growth_bytes: True)
    staging.receive(_chunk(0, range(0, 5), map_entries=100_005, last=False), window=4)
    assert staging.room_ahead_bytes() == 100_000 * RESERVED_RECORD_BYTES
    staging.receive(_chunk(1, range(5, 10), map_entries=100_005, last=True), window=4)
    assert staging.room_ahead_bytes() == 0  # whole: the room not filled is given back
    assert len(staging.maps["m"]) == 10
    # More than a map can hold: the engine refuses the room (an outside tester found the refusal
    # ended the member); the records come all the same, and nothing is set aside.
    refused = Staging(fits=lambda growth_bytes: True)
    refused.receive(_chunk(0, range(0, 5), map_entries=2**53, last=False), window=4)
    assert refused.room_ahead_bytes() == 0
    refused.receive(_chunk(1, range(5, 10), map_entries=2**53, last=True), window=4)
    assert len(refused.maps["m"]) == 10


def test_a_sender_that_overstates_its_count_makes_no_room_past_what_fits():
    asked: list[int] = []
    refused = Staging(fits=lambda growth_bytes: asked.append(growth_bytes) or False)
    refused.receive(_chunk(0, range(0, 5), map_entries=2**53, last=True), window=4)
    assert asked == [(2**53 - 5) * RESERVED_RECORD_BYTES]
    assert refused.room_ahead_bytes() == 0
    assert len(refused.maps["m"]) == 5  # taken all the same: the count only sizes the table
