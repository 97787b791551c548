"""What a partition remembers of its clients' writes (``core.write_records``): exact within the
window, bounded everywhere, and the same after it moves to another replica."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.write_records import (
    MAX_ANSWER_BYTES_PER_PARTITION,
    MAX_ANSWERS_PER_WRITER,
    MAX_WRITERS_PER_PARTITION,
    WINDOW_IDS,
    Seen,
    WriteRecords,
    WriterRecord,
    records_problem,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 3 * WINDOW_IDS), max_size=200), st.lists(st.integers(1, 3 * WINDOW_IDS), max_size=50))
def test_within_the_window_a_write_is_applied_exactly_when_it_was_recorded(recorded, asked):
    records = WriteRecords()
    for write_id in recorded:
        records.record("c", write_id, 1, None, expires_ms=10_000)
    high = max(recorded, default=0)
    for write_id in [*recorded, *asked]:
        seen, _ = records.seen("c", write_id, now_ms=0)
        if not recorded or write_id > high or (high - write_id < WINDOW_IDS and write_id not in recorded):
            assert seen is Seen.NEW
        elif high - write_id < WINDOW_IDS:
            assert seen is Seen.APPLIED
        else:
            assert seen is Seen.TOO_OLD  # never NEW: it may have been applied


def test_a_writer_past_its_time_is_forgotten_and_another_client_is_apart():
    records = WriteRecords()
    records.record("a", 5, 1, None, expires_ms=1_000)
    assert records.seen("a", 5, now_ms=999)[0] is Seen.APPLIED
    assert records.seen("b", 5, now_ms=999)[0] is Seen.NEW
    assert records.seen("a", 5, now_ms=1_001)[0] is Seen.NEW  # no attempt of it can come any more


def test_answers_are_bounded_per_writer_and_in_bytes_per_partition():
    records = WriteRecords()
    for write_id in range(1, 3 * MAX_ANSWERS_PER_WRITER):
        records.record("a", write_id, write_id, (b"v",), expires_ms=10_000)
    writer = records.writers["a"]
    assert len(writer.answers) == MAX_ANSWERS_PER_WRITER
    assert writer.forgotten_sequence == 3 * MAX_ANSWERS_PER_WRITER - 1 - MAX_ANSWERS_PER_WRITER
    big = b"x" * (MAX_ANSWER_BYTES_PER_PARTITION // 4)
    for write_id in range(1, 10):
        records.record("b", write_id, write_id, (big,), expires_ms=10_000)
    assert records.answer_bytes <= MAX_ANSWER_BYTES_PER_PARTITION
    assert records.seen("b", 1, now_ms=0)[0] is Seen.APPLIED  # the answer went, not the fact


def test_a_partition_full_of_live_writers_makes_room_only_as_they_expire():
    records = WriteRecords()
    for n in range(MAX_WRITERS_PER_PARTITION):
        assert records.room_for(f"c{n}", now_ms=0)
        records.record(f"c{n}", 1, 1, None, expires_ms=1_000 + n)
    assert records.room_for("c0", now_ms=0)  # a writer it knows
    assert not records.room_for("new", now_ms=500)
    assert records.room_for("new", now_ms=1_000 + 5)  # six have expired


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 2 * WINDOW_IDS)), max_size=60))
def test_what_travels_to_another_replica_answers_the_same(writes):
    records = WriteRecords()
    for client, write_id in writes:
        records.record(client, write_id, write_id, (client.encode(),), expires_ms=50_000)
    moved = WriteRecords()
    moved.install(records.snapshot(now_ms=1_000), now_ms=7_000)
    for client in ("a", "b", "c", "d"):
        for write_id in range(1, 2 * WINDOW_IDS + 1, 97):
            assert moved.seen(client, write_id, 7_000)[0] is records.seen(client, write_id, 1_000)[0]
    for client, writer in records.writers.items():
        assert moved.writers[client].answers == writer.answers
        assert moved.writers[client].expires_ms == writer.expires_ms + 6_000  # the rest of its time, from now


def test_writers_from_a_peer_that_do_not_hang_together_are_refused():
    good = WriterRecord(client_id="a", high=5, window=b"\x01", ttl_ms=10)
    assert records_problem((good,)) == ""
    assert "twice" in records_problem((good, good))
    uneven = WriterRecord(client_id="a", high=5, window=b"\x01", ttl_ms=10, answer_ids=(5,), answer_sequences=())
    assert "differ in length" in records_problem((uneven,))
    above = WriterRecord(
        client_id="a", high=5, window=b"\x01", ttl_ms=10, answer_ids=(6,), answer_sequences=(1,), answer_values=(None,)
    )
    assert "above its highest" in records_problem((above,))
