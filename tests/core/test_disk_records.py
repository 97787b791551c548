"""The disk's record framing: what was written reads back; a file cut anywhere reads back the
records before the cut as a torn tail; a flipped bit in a record is corruption when records follow
it, and never reads back as a record that was not written."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shardgrid.core.disk_records import HEADER, MAX_RECORD_BYTES, encode_record, scan_records

records = st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=64)), max_size=8)


def encoded(items: list[tuple[int, bytes]]) -> tuple[bytes, list[int]]:
    """The file and where each record starts."""
    starts, out = [], bytearray()
    for kind, payload in items:
        starts.append(len(out))
        out += encode_record(kind, payload)
    return bytes(out), starts


@given(records)
def test_what_was_written_reads_back(items: list[tuple[int, bytes]]) -> None:
    data, _ = encoded(items)
    scan = scan_records(data)
    assert list(scan.records) == items
    assert (scan.valid_bytes, scan.torn_bytes, scan.corrupt) == (len(data), 0, "")


@given(records, st.data())
def test_a_file_cut_anywhere_is_a_torn_tail_after_the_whole_records(items: list[tuple[int, bytes]], data) -> None:
    whole, starts = encoded(items)
    cut = data.draw(st.integers(0, len(whole)))
    scan = scan_records(whole[:cut])
    kept = sum(
        1 for start, (_, payload) in zip(starts, items, strict=False) if start + HEADER.size + len(payload) <= cut
    )
    assert list(scan.records) == items[:kept]
    assert scan.corrupt == ""
    assert scan.valid_bytes + scan.torn_bytes == cut
    assert scan.valid_bytes == (starts[kept] if kept < len(items) else len(whole))


@given(records.filter(lambda items: len(items) >= 2), st.data())
def test_a_flipped_bit_is_caught_and_never_read_as_a_record(items: list[tuple[int, bytes]], data) -> None:
    whole, starts = encoded(items)
    victim = data.draw(st.integers(0, len(items) - 2))  # a record that others follow
    end = starts[victim + 1]
    position = data.draw(st.integers(starts[victim], end - 1))
    bit = data.draw(st.integers(0, 7))
    damaged = bytearray(whole)
    damaged[position] ^= 1 << bit
    scan = scan_records(damaged)
    assert list(scan.records) == items[:victim]
    assert scan.valid_bytes == starts[victim]
    if position >= starts[victim] + 4:  # not in its length: the record still ends where it did
        assert scan.corrupt != ""
    else:  # a longer length may reach past the end of the file: a torn tail, as far as it can tell
        assert scan.corrupt != "" or scan.valid_bytes + scan.torn_bytes == len(damaged)


@given(records.filter(bool), st.integers(1, 64))
def test_a_last_record_that_fails_its_checksum_before_zeros_is_torn(items, zeros: int) -> None:
    whole, starts = encoded(items)
    damaged = bytearray(whole)
    damaged[-1 if len(items[-1][1]) else starts[-1] + 5] ^= 0xFF
    scan = scan_records(bytes(damaged) + bytes(zeros))
    assert list(scan.records) == items[:-1]
    assert scan.corrupt == ""
    assert scan.torn_bytes == len(whole) - starts[-1] + zeros


def test_a_length_no_writer_writes_is_corruption() -> None:
    good = encode_record(1, b"abc")
    bad = bytearray(encode_record(2, b"xyz"))
    bad[0:4] = (MAX_RECORD_BYTES + 1).to_bytes(4, "little")
    scan = scan_records(good + bytes(bad))
    assert scan.records == ((1, b"abc"),)
    assert "over" in scan.corrupt
