"""The disk's record framing: what was written reads back; a file cut anywhere, or with sectors the
disk never wrote, reads back the records before the damage as a torn tail; a flipped bit anywhere
in any record (its length included, the last record included) is corruption, and never reads back
as a record that was not written; and damage of any kind before a point a sync marker vouches for
is corruption, zeros or not."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from shardgrid.core.disk_records import (
    HEADER,
    MAX_RECORD_BYTES,
    SECTOR_BYTES,
    RecordKind,
    encode_record,
    scan_records,
    sync_marker,
)

kinds = st.integers(0, 255).filter(lambda kind: kind != RecordKind.SYNCED)  # a marker is the writer's own
records = st.lists(st.tuples(kinds, st.binary(max_size=64)), max_size=8)
# Records that span sectors: payloads up to a few sectors long (a byte repeated, so no sector of
# them is zeros unless the test zeroes it).
spanning = st.lists(
    st.tuples(kinds, st.integers(1, 255), st.integers(0, 3 * SECTOR_BYTES)).map(lambda t: (t[0], bytes([t[1]]) * t[2])),
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


# Payloads that hold zeros of their own (a value of zeros, a run of zero lengths), whole sectors of
# them included, between bytes that are not.
zero_holding = st.lists(
    st.tuples(kinds, st.integers(0, 3 * SECTOR_BYTES), st.integers(0, 3 * SECTOR_BYTES)).map(
        lambda t: (t[0], b"v" * t[1] + bytes(2 * SECTOR_BYTES) + b"w" * t[2])
    ),
    min_size=1,
    max_size=3,
)


def synced_in_groups(groups: list[list[tuple[int, bytes]]]) -> tuple[bytes, list[tuple[int, int, int | None]]]:
    """A file as a writer leaves it: each group of records followed by the marker of its sync,
    the last group not synced yet; and each record's (start, end, what it vouches for: None for a
    record that is not a marker)."""
    out, layout = bytearray(), []
    for number, group in enumerate(groups):
        for kind, payload in group:
            start = len(out)
            out += encode_record(kind, payload)
            layout.append((start, len(out), None))
        if number < len(groups) - 1:
            start = len(out)
            out += sync_marker(start)
            layout.append((start, len(out), start))
    return bytes(out), layout


@given(st.lists(zero_holding, min_size=1, max_size=4), st.data())
def test_damage_before_what_a_later_sync_marker_vouches_for_is_corruption_zeros_or_not(groups, data) -> None:
    """The class of an outside tester's finding: a synced record holding a sector of zeros, damaged
    anywhere (here one sector of it zeroed, or one bit flipped), was read as a torn tail, and every
    record after it was cut off unnoticed. A marker after it that vouches for it (its header intact,
    the records between stepped over) makes it corruption; damage past every marker's point is a
    tear."""
    whole, layout = synced_in_groups(groups)
    damaged = bytearray(whole)
    zeroed = data.draw(st.booleans())
    if zeroed:
        sector = data.draw(st.integers(0, (len(whole) - 1) // SECTOR_BYTES))
        low, high = sector * SECTOR_BYTES, min((sector + 1) * SECTOR_BYTES, len(whole))
        damaged[low:high] = bytes(high - low)
    else:
        position = data.draw(st.integers(0, len(whole) - 1))
        damaged[position] ^= 1 << data.draw(st.integers(0, 7))
    changed = [i for i, (start, end, _) in enumerate(layout) if damaged[start:end] != whole[start:end]]
    assume(changed)
    first = changed[0]
    start = layout[first][0]

    def header_intact(number: int) -> bool:
        at = layout[number][0]
        return damaged[at : at + HEADER.size] == whole[at : at + HEADER.size]

    # Vouched for: the damaged record's header intact, and an intact marker after it reached by
    # stepping over intact headers.
    vouched = False
    if header_intact(first):
        for number in range(first + 1, len(layout)):
            if not header_intact(number):
                break
            if layout[number][2] is not None and number not in changed:
                vouched = True
                break
    scan = scan_records(bytes(damaged))
    kept = [record for group in groups for record in group][: sum(1 for _, _, v in layout[:first] if v is None)]
    assert list(scan.records) == kept
    assert scan.valid_bytes == start
    if vouched:
        assert scan.corrupt != ""
        assert scan.torn_bytes == 0
    elif zeroed:  # a sector never written, past every point a marker vouches for: a tear
        assert (scan.corrupt, scan.torn_bytes) == ("", len(damaged) - start)
    assert all(end <= start for end in scan.ends)


def test_a_marker_that_is_not_where_it_says_the_durable_bytes_end_is_corruption() -> None:
    record = encode_record(1, b"abc")
    assert "marker" in scan_records(record + sync_marker(len(record) + 1)).corrupt
    assert "marker" in scan_records(record + sync_marker(len(record) - 1)).corrupt
    scan = scan_records(record + sync_marker(len(record)))
    assert (scan.records, scan.ends, scan.valid_bytes, scan.corrupt) == (
        ((1, b"abc"),),
        (len(record),),
        len(record) + len(sync_marker(0)),
        "",
    )


def test_a_marker_inside_a_value_vouches_for_nothing() -> None:
    """A client may write a value holding a marker's bytes, each claiming the very place it lands
    on (an outside tester's attack: a spray of claims covers the offsets a value may land at). In a
    torn record, they are not at a record's boundary, and the tear is still a tear; behind them
    too."""
    first = encode_record(1, b"a" * 100)
    base = len(first) + HEADER.size + 2 * SECTOR_BYTES
    size = len(sync_marker(0))
    forged = b"".join(sync_marker(base + i * size) for i in range(64))
    torn = bytearray(encode_record(2, bytes(SECTOR_BYTES * 2) + forged))
    torn[-1] ^= 1  # its payload fails its checksum; its first sectors read as zeros
    scan = scan_records(first + bytes(torn))
    assert (scan.records, scan.torn_bytes, scan.corrupt) == (((1, b"a" * 100),), len(torn), "")
    behind = encode_record(3, b"b" * 50)  # a record after it, of the same unsynced group
    scan = scan_records(first + bytes(torn) + behind)
    assert (scan.records, scan.torn_bytes, scan.corrupt) == (((1, b"a" * 100),), len(torn) + len(behind), "")
