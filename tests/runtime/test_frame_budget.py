"""The process-wide budget of part-read client frames: the budget alone (claims, first come first
served, never over capacity), and a FrameStream following its part-read frame with claims, pausing
its reading while a claim waits and timing a claimed frame only while it reads."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.errors import InvariantViolation
from shardgrid.runtime.frame_budget import UNBUDGETED_FRAME_BYTES, FrameBudget
from shardgrid.runtime.process import _CLIENT_CODES
from shardgrid.runtime.stream import FrameStream
from tests.wire import map_request

MIB = 1024 * 1024


class Claimer:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def budget_granted(self, frame_bytes: int) -> None:
        self.log.append(self.name)

    def __repr__(self) -> str:
        return self.name


def test_claims_that_fit_are_granted_at_once_and_the_rest_wait_in_order() -> None:
    granted: list[str] = []
    budget = FrameBudget(10)
    a, b, c, d = (Claimer(name, granted) for name in "abcd")
    assert budget.claim(a, 6)
    assert not budget.claim(b, 6)  # 12 > 10
    assert not budget.claim(c, 1)  # would fit, but b came first
    assert budget.claimed_bytes == 6
    assert budget.waiting == 2
    budget.release(a)
    assert granted == ["b", "c"]
    assert budget.claimed_bytes == 7
    assert budget.waiting == 0
    assert not budget.claim(d, 4)
    budget.release(c)
    assert granted == ["b", "c", "d"]
    assert budget.claimed_bytes == 10


def test_a_waiting_claim_that_leaves_lets_the_next_one_in() -> None:
    granted: list[str] = []
    budget = FrameBudget(10)
    a, b, c = (Claimer(name, granted) for name in "abc")
    assert budget.claim(a, 5)
    assert not budget.claim(b, 8)
    assert not budget.claim(c, 5)
    budget.release(b)  # its connection closed while it waited
    assert granted == ["c"]
    assert budget.claimed_bytes == 10
    budget.release(b)  # twice: nothing happens
    assert budget.claimed_bytes == 10


def test_a_claim_is_one_per_claimant_and_fits_the_budget() -> None:
    budget = FrameBudget(10)
    a = Claimer("a", [])
    with pytest.raises(InvariantViolation):
        budget.claim(a, 11)
    assert budget.claim(a, 3)
    with pytest.raises(InvariantViolation):
        budget.claim(a, 3)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 50),
    steps=st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.integers(1, 50)), max_size=80),
)
def test_claims_never_pass_the_budget_and_are_granted_in_order(
    capacity: int, steps: list[tuple[bool, int, int]]
) -> None:
    granted: list[str] = []
    budget = FrameBudget(capacity)
    claimers = [Claimer(str(i), granted) for i in range(8)]
    holding: dict[Claimer, int] = {}
    waiting: list[Claimer] = []
    for is_claim, who, size in steps:
        claimer = claimers[who]
        if is_claim and claimer not in holding and claimer not in waiting:
            size = min(size, capacity)
            if budget.claim(claimer, size):
                holding[claimer] = size
            else:
                waiting.append(claimer)
                holding[claimer] = -size
        elif not is_claim:
            before = len(granted)
            budget.release(claimer)
            holding.pop(claimer, None)
            if claimer in waiting:
                waiting.remove(claimer)
            # Grants go to the longest waiting first, each one of them in turn.
            for name in granted[before:]:
                first = waiting.pop(0)
                assert first.name == name
                holding[first] = -holding[first]
            if waiting:
                assert budget.claimed_bytes - holding[waiting[0]] > capacity  # the first still does not fit
        assert budget.claimed_bytes == sum(size for size in holding.values() if size > 0) <= capacity
        assert budget.waiting == len(waiting)
    for claimer in list(holding):
        budget.release(claimer)
    assert budget.claimed_bytes == 0
    assert budget.waiting == 0


# --- a FrameStream under a budget ----------------------------------------------------------------


class Transport:
    def __init__(self) -> None:
        self.reading = True
        self.closed = False

    def write(self, data: bytes) -> None: ...

    def writelines(self, frames: list[bytes]) -> None: ...

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int, low: int) -> None: ...

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class Owner:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    def on_connected(self, stream: FrameStream) -> None: ...

    def on_messages(self, stream: FrameStream, messages: list[Any]) -> None:
        self.messages.extend(messages)

    def on_broken(self, stream: FrameStream, reason: str) -> None: ...

    def on_closed(self, stream: FrameStream) -> None: ...

    def on_backlog(self, stream: FrameStream, over_high_water: bool) -> None: ...


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def time(self) -> float:
        return self.now


def _client_stream(budget: FrameBudget, clock: Clock) -> tuple[FrameStream, Transport, Owner]:
    owner = Owner()
    stream = FrameStream(owner, 16 * MIB, 4 * MIB, accepted=True)
    transport = Transport()

    async def connect() -> None:
        stream.connection_made(transport)  # type: ignore[arg-type]

    asyncio.run(connect())
    stream._loop = clock  # type: ignore[assignment]
    stream.accept_only(_CLIENT_CODES, budget=budget)
    return stream, transport, owner


def _put_frame(value_bytes: int, call_id: int = 1) -> bytes:
    return codec.encode(
        map_request(call_id=call_id, kind=m.PUT, map_name="map", keys=(b"k",), values=(bytes(value_bytes),))
    )


def test_a_stream_claims_its_part_read_frame_and_waits_for_the_budget() -> None:
    clock = Clock()
    budget = FrameBudget(3 * MIB)
    first, first_transport, first_owner = _client_stream(budget, clock)
    second, second_transport, second_owner = _client_stream(budget, clock)
    big = _put_frame(2 * MIB)
    first.data_received(big[:1000])
    assert first.claimed_frame_bytes == len(big) - 4
    assert budget.claimed_bytes == len(big) - 4
    second.data_received(big[:1000])  # does not fit beside the first
    assert not second_transport.reading
    assert budget.waiting == 1
    second.resume_reading()  # the owner's resume does not override a waiting claim
    assert not second_transport.reading
    first.data_received(big[1000:])
    assert len(first_owner.messages) == 1
    assert first.claimed_frame_bytes == 0
    assert second_transport.reading
    assert budget.claimed_bytes == len(big) - 4
    second.data_received(big[1000:])
    assert len(second_owner.messages) == 1
    assert budget.claimed_bytes == 0
    assert first_transport.reading


def test_small_frames_part_read_need_no_claim() -> None:
    budget = FrameBudget(16 * MIB)
    stream, _, owner = _client_stream(budget, Clock())
    small = _put_frame(UNBUDGETED_FRAME_BYTES // 2)
    stream.data_received(small[:100])
    assert stream.claimed_frame_bytes == 0
    assert budget.claimed_bytes == 0
    stream.data_received(small[100:])
    assert len(owner.messages) == 1


def test_the_next_frame_of_the_same_length_is_a_new_claim_with_a_new_clock() -> None:
    clock = Clock()
    budget = FrameBudget(16 * MIB)
    stream, _, owner = _client_stream(budget, clock)
    one, two = _put_frame(MIB, 1), _put_frame(MIB, 2)
    assert len(one) == len(two)
    stream.data_received(one[:5000])
    clock.now += 20
    stream.data_received(one[5000:] + two[:5000])  # the first ends and the next begins, as long
    assert len(owner.messages) == 1
    assert stream.claimed_frame_bytes == len(two) - 4
    clock.now += 20
    assert not stream.frame_overdue(30_000, 30_000)  # 20 s of this frame, not 40
    clock.now += 11
    assert "was not whole 30000 ms after it was let in" in stream.frame_overdue(30_000, 30_000)


def test_a_frame_as_long_as_the_budget_is_claimed() -> None:
    """Found by an outside tester: the claim counted the length prefix too, so with a budget of
    max_frame_bytes a frame of that length broke an invariant in data_received."""
    frame = _put_frame(2 * MIB)
    budget = FrameBudget(len(frame) - 4)
    stream, _, owner = _client_stream(budget, Clock())
    stream.data_received(frame[:1000])
    assert budget.claimed_bytes == budget.capacity_bytes
    stream.data_received(frame[1000:])
    assert len(owner.messages) == 1


def _second_in_line(clock: Clock) -> tuple[FrameBudget, FrameStream, FrameStream, Transport]:
    """Two streams that each began a frame of 2 MiB, in a budget of 3: the second one waits."""
    budget = FrameBudget(3 * MIB)
    holder, _, _ = _client_stream(budget, clock)
    stream, transport, _ = _client_stream(budget, clock)
    big = _put_frame(2 * MIB)
    holder.data_received(big[:1000])
    stream.data_received(big[:1000])
    return budget, holder, stream, transport


def test_a_claimed_frame_is_timed_from_its_grant_and_stalls_only_while_it_is_read() -> None:
    clock = Clock()
    budget, holder, stream, transport = _second_in_line(clock)
    clock.now += 100  # waiting for the budget: not timed
    assert not stream.frame_overdue(30_000, 5_000)
    holder.close()  # gives its claim back
    assert transport.reading
    clock.now += 4
    assert not stream.frame_overdue(30_000, 5_000)
    clock.now += 2
    assert "no byte of a frame" in stream.frame_overdue(30_000, 5_000)  # 6 s granted, nothing came
    stream.data_received(b"\x00" * 100)
    assert not stream.frame_overdue(30_000, 5_000)
    stream.pause_reading()  # the owner's answers pile up: nothing can come, so no stall ...
    clock.now += 20
    assert not stream.frame_overdue(30_000, 5_000)
    stream.resume_reading()
    clock.now += 4
    assert not stream.frame_overdue(30_000, 5_000)
    clock.now += 1  # ... but its time from the grant runs on: a client that reads no answers
    assert "was not whole 30000 ms after" in stream.frame_overdue(30_000, 5_000)
    stream.abort()
    assert budget.claimed_bytes == 0
    assert not stream.frame_overdue(30_000, 5_000)


def test_a_stream_closed_while_its_claim_waits_leaves_the_queue() -> None:
    budget, holder, waiting, _ = _second_in_line(Clock())
    assert budget.waiting == 1
    waiting.connection_lost(None)
    assert budget.waiting == 0
    holder.connection_lost(None)
    assert budget.claimed_bytes == 0
