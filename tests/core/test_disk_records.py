"""The disk's record framing: what was written reads back; a file cut anywhere, or with sectors the
disk never wrote, reads back the records before the damage as a torn tail; a flipped bit anywhere
in any record (its length included, the last record included) is corruption, and never reads back
as a record that was not written."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from shardgrid.core.disk_records import MAX_RECORD_BYTES, SECTOR_BYTES, encode_record, scan_records

records = st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=64)), max_size=8)
# Records that span sectors: payloads up to a few sectors long (a byte repeated, so no sector of
# them is zeros unless the test zeroes it).
spanning = st.lists(
    st.tuples(st.integers(0, 255), st.integers(1, 255), st.integers(0, 3 * SECTOR_BYTES)).map(
        lambda t: (t[0], bytes([t[1]]) * t[2])
    ),
    min_size=2,
    max_size=6,
)


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
    ends = [start + len(encode_record(kind, payload)) for start, (kind, payload) in zip(starts, items, strict=True)]
    kept = sum(1 for end in ends if end <= cut)
    assert list(scan.records) == items[:kept]
    assert scan.corrupt == ""
    assert scan.valid_bytes + scan.torn_bytes == cut
    assert scan.valid_bytes == (starts[kept] if kept < len(items) else len(whole))


@given(records.filter(bool), st.data())
def test_a_flipped_bit_anywhere_is_corruption_and_never_read_as_a_record(items: list[tuple[int, bytes]], data) -> None:
    whole, starts = encoded(items)
    victim = data.draw(st.integers(0, len(items) - 1))  # the last record too
    end = starts[victim + 1] if victim + 1 < len(items) else len(whole)
    position = data.draw(st.integers(starts[victim], end - 1))
    damaged = bytearray(whole)
    damaged[position] ^= 1 << data.draw(st.integers(0, 7))
    scan = scan_records(damaged)
    assert list(scan.records) == items[:victim]
    assert scan.valid_bytes == starts[victim]
    assert scan.corrupt != ""  # the length is checked too: a flipped one is not a torn tail


@given(spanning, st.data())
def test_a_last_record_the_disk_wrote_only_in_part_is_torn(items: list[tuple[int, bytes]], data) -> None:
    """Zeros from the record's start, or from a sector boundary inside it, to the end: the sectors
    of it the disk never wrote."""
    whole, starts = encoded(items)
    last = starts[-1]
    boundaries = [last, *range((last // SECTOR_BYTES + 1) * SECTOR_BYTES, len(whole), SECTOR_BYTES)]
    cut = data.draw(st.sampled_from(boundaries))
    padding = data.draw(st.integers(0, 64))  # a file system that grew the file first
    damaged = whole[:cut] + bytes(len(whole) - cut + padding)
    scan = scan_records(damaged)
    assert list(scan.records) == items[:-1]
    assert (scan.valid_bytes, scan.torn_bytes, scan.corrupt) == (last, len(damaged) - last, "")


@given(spanning, st.data())
def test_a_sector_never_written_in_a_group_of_unsynced_records_is_torn(items, data) -> None:
    """A power cut may write later sectors and not earlier ones: the records from the first one the
    lost sector touches on were never synced, and are dropped, not taken for corruption."""
    whole, starts = encoded(items)
    sector = data.draw(st.integers(0, (len(whole) - 1) // SECTOR_BYTES))
    low, high = sector * SECTOR_BYTES, min((sector + 1) * SECTOR_BYTES, len(whole))
    damaged = whole[:low] + bytes(high - low) + whole[high:]
    ends = [*starts[1:], len(whole)]
    changed = [
        i for i, (start, end) in enumerate(zip(starts, ends, strict=True)) if damaged[start:end] != whole[start:end]
    ]
    assume(changed)  # a sector whose bytes were zeros already changes nothing
    first = changed[0]
    scan = scan_records(damaged)
    assert list(scan.records) == items[:first]
    assert (scan.valid_bytes, scan.torn_bytes, scan.corrupt) == (starts[first], len(damaged) - starts[first], "")


def test_a_checked_length_no_writer_writes_is_corruption() -> None:
    import struct
    import zlib

    checked = struct.pack("<IBI", MAX_RECORD_BYTES + 1, 2, 0)
    bad = checked + struct.pack("<I", zlib.crc32(checked)) + b"xyz"
    scan = scan_records(encode_record(1, b"abc") + bad)
    assert scan.records == ((1, b"abc"),)
    assert "over" in scan.corrupt
