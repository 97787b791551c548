"""The framing of everything a member writes to its disk: checksummed records, one after another.

A record is a 13-byte header, ``length (u32) | kind (u8) | payload crc32 (u32) | header crc32
(u32)``, little-endian, then the payload. The header has a checksum of its own, so a length is
trusted only once it is checked: a flipped bit in it cannot pass for a record cut short (found by
an outside tester: with one checksum over the whole record, a damaged length that reached past
the end of the file read as a torn tail, and opening the file cut off every record after it).
Pure bytes in, records out: the runtime reads and writes the files, the simulator keeps them in
memory, and both scan them with this.

Reading a file tells apart two kinds of damage, since they call for different answers:

- A **torn tail**: the process or the machine stopped while the last records were being written.
  The file ends inside a record, or a record fails a checksum where its part of a sector (512
  bytes, aligned as the disk writes them) reads as zeros to the sector's end: a sector the disk
  never wrote, as a power cut leaves a group of unsynced records, later ones perhaps written and
  earlier ones not (etcd's WAL tells torn writes by zeroed sectors too).
  Nothing from there on was acknowledged as durable (records are synced in the order written, and
  acknowledged only after their sync), so the scan stops there and says how many bytes it dropped.
- **Corruption**: a record fails a checksum with no such sign, or a checked header states a length
  no writer writes. What was acknowledged may be gone; the member must say which file and where,
  and refuse to serve what it cannot trust.

A value may hold zeros of its own, so a damaged record whose payload has a zeroed sector would
pass for a torn tail, and every record after it would be cut off unnoticed (found by an outside
tester: one flipped bit cut 51 of 52 records). So a writer appends a **sync marker** after each
sync: a record saying that the file's first N bytes are durable, written only once the sync
returned (it needs no sync of its own: it is carried by the next one, or lost harmlessly). A
record that fails a checksum before a point some marker after it vouches for was on the disk: it
is corruption, zeros or not. The markers after it are found by stepping over the records by their
checked headers, never by looking for a marker's bytes (a client's value may hold them), so a
record whose header itself reads as zeros still passes for a tear: past it nothing can be stepped
over. A scan hands markers to no reader.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass, field

from shardgrid.core.errors import CorruptDisk, invariant

HEADER = struct.Struct("<IBII")  # length, kind, payload crc32, header crc32 (of the 9 bytes before it)
_CHECKED = struct.Struct("<IBI")  # the part of the header its checksum covers
SECTOR_BYTES = 512  # the unit a disk writes whole or not at all
MAX_RECORD_BYTES = 64 * 1024 * 1024  # one record: a Raft snapshot or a chunk of a partition, with room
# A member short of disk rewrites a file sooner than its usual rule, once that frees a quarter of
# it and at least this much; and builds a rewrite to measure it at most once for each eighth of
# the file (or this much) that it grew by (``worth_measuring``, ``frees_enough``).
COMPACT_EARLY_ABOVE_BYTES = 16 * 1024


class RecordKind(enum.IntEnum):
    """What a record holds; a file holds the kinds of one concern. Never reuse or renumber one."""

    RAFT_WRITE = 1  # one Raft step's RaftWrite (codec.encode_raft_write)
    REPLICA_RUN = 2  # a write run a copy applied (replica_disk)
    REPLICA_HEADER = 3  # a copy's lineage, sequence, slot, versions and maps; an image's first record
    REPLICA_PAGE = 4  # a page of an image's records
    REPLICA_DROP = 5  # the member no longer holds a partition
    REPLICA_STEP_END = 6  # the end of one step's replica records
    MEMBER_IDENTITY = 7  # who the member is (member_disk)
    BACKUP_PAGE = 8  # some records of one partition of one map, in a backup (client.backup)
    SYNCED = 9  # a sync marker: the file's bytes before it were durable (``sync_marker``)


@dataclass(frozen=True, slots=True)
class Scan:
    """What a file holds: its records (kind, payload) up to the first damage, and the damage."""

    records: tuple[tuple[int, bytes], ...]
    valid_bytes: int  # the length of the intact prefix: where the next record goes
    torn_bytes: int  # bytes of a torn tail after it (0 when the file ends cleanly)
    corrupt: str  # why the file is corrupt at ``valid_bytes`` ('' when it is not)
    ends: tuple[int, ...] = ()  # where each record ends in the file (sync markers lie between)


def worth_measuring(grown_bytes: int, size_bytes: int) -> bool:
    """Whether a file that grew ``grown_bytes`` since its rewrite was last built (of ``size_bytes``
    then or now) is worth building one again: bounded work, once per eighth it grows by."""
    return grown_bytes >= max(COMPACT_EARLY_ABOVE_BYTES, size_bytes // 8)


def frees_enough(file_bytes: int, whole_bytes: int) -> bool:
    """Whether rewriting a file of ``file_bytes`` as ``whole_bytes`` frees enough to be done early."""
    return file_bytes - whole_bytes >= max(COMPACT_EARLY_ABOVE_BYTES, file_bytes // 4)


def refuse_corrupt(scan: Scan, name: object) -> None:
    """``CorruptDisk`` naming the file and the byte, when the scan found corruption."""
    if scan.corrupt:
        raise CorruptDisk(f"{name} is corrupt at byte {scan.valid_bytes}: {scan.corrupt}")


def encode_record(kind: int, payload: bytes) -> bytes:
    invariant(0 <= kind < 256, lambda: f"record kind {kind} is not a byte")
    invariant(len(payload) <= MAX_RECORD_BYTES, lambda: f"a {len(payload)}-byte record is over the limit")
    checked = _CHECKED.pack(len(payload), kind, zlib.crc32(payload))
    return checked + struct.pack("<I", zlib.crc32(checked)) + payload


# A sync marker's payload: this tag, then the durable length (u64): where the marker stands.
_MARKER_TAG = b"shardgrid-synced"
_MARKER = struct.Struct("<16sQ")


def sync_marker(durable_bytes: int) -> bytes:
    """The record a writer appends once a sync returned, at byte ``durable_bytes``: everything
    before it is on the disk."""
    return encode_record(RecordKind.SYNCED, _MARKER.pack(_MARKER_TAG, durable_bytes))


def _marks_its_place(payload: memoryview, position: int) -> bool:
    """Whether a sync marker's payload (its checksum checked) stands where it says the durable
    bytes end, as a writer puts it: one found elsewhere (a value a client wrote may hold a
    marker's bytes) vouches for nothing."""
    if len(payload) != _MARKER.size:
        return False
    tag, durable_bytes = _MARKER.unpack(payload)
    return tag == _MARKER_TAG and durable_bytes == position


def _vouched_past(view: memoryview, stop: int) -> int:
    """Where an intact sync marker after a damaged record ending at ``stop`` stands (it vouches for
    everything before it), or 0 when none does. The records after it are stepped over by their
    checked headers, so only a marker a writer put at a record's boundary counts: a client's value
    may hold a marker's bytes at the very place they claim (found by an outside tester: a value of
    markers claiming many places, torn, was taken for synced data and the member refused to
    start). A record whose header fails its checksum ends the walk: past it nothing is stepped
    over, and the damage reads as a tear."""
    end = len(view)
    position = stop
    while end - position >= HEADER.size:
        length, kind, payload_crc, header_crc = HEADER.unpack_from(view, position)
        if zlib.crc32(view[position : position + _CHECKED.size]) != header_crc or length > MAX_RECORD_BYTES:
            return 0
        body_end = position + HEADER.size + length
        if kind == RecordKind.SYNCED and body_end <= end:
            payload = view[position + HEADER.size : body_end]
            if zlib.crc32(payload) == payload_crc and _marks_its_place(payload, position):
                return position
        position = body_end
    return 0


def scan_records(data: bytes | bytearray | memoryview) -> Scan:
    """Every intact record of ``data``, in order, and what stopped the scan."""
    view = memoryview(data)
    read = _Read()
    position = 0
    end = len(view)
    while position < end:
        if end - position < HEADER.size:
            return read.scan(position, end - position)  # a header cut short
        length, kind, payload_crc, header_crc = HEADER.unpack_from(view, position)
        body_start = position + HEADER.size
        if zlib.crc32(view[position : position + _CHECKED.size]) != header_crc:
            return _damaged(
                read, view, position, body_start, "a record's header fails its checksum", header_checked=False
            )
        if length > MAX_RECORD_BYTES:
            return read.scan(position, 0, f"a record states {length} bytes, over {MAX_RECORD_BYTES}")
        body_end = body_start + length
        if body_end > end:
            return read.scan(position, end - position)  # a payload cut short
        payload = view[body_start:body_end]
        if zlib.crc32(payload) != payload_crc:
            return _damaged(read, view, position, body_end, "a record fails its checksum", header_checked=True)
        if kind != RecordKind.SYNCED:
            read.records.append((kind, bytes(payload)))
            read.ends.append(body_end)
        elif not _marks_its_place(payload, position):
            return read.scan(position, 0, "a sync marker is malformed or not where it says the durable bytes end")
        position = body_end
    return read.scan(position, 0)


@dataclass(slots=True)
class _Read:
    """What a scan has read so far: the records, and where each ends in the file."""

    records: list[tuple[int, bytes]] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def scan(self, valid_bytes: int, torn_bytes: int, corrupt: str = "") -> Scan:
        return Scan(tuple(self.records), valid_bytes, torn_bytes, corrupt, tuple(self.ends))


def _damaged(read: _Read, view: memoryview, start: int, stop: int, reason: str, *, header_checked: bool) -> Scan:
    """A record from ``start`` to ``stop`` that fails a checksum: torn when, in a sector it lies in,
    everything from where the record begins in it to the sector's end reads as zeros (a sector the
    disk never wrote holds what it held before: zeros past the old end of the file, the earlier
    records before it), unless its header is intact and a sync marker after it says it was on the
    disk; corrupt otherwise."""
    end = len(view)
    for sector in range(start // SECTOR_BYTES, (max(stop, start + 1) - 1) // SECTOR_BYTES + 1):
        low = max(sector * SECTOR_BYTES, start)
        high = min((sector + 1) * SECTOR_BYTES, end)
        if low < high and view[low:high].tobytes().count(0) == high - low:
            durable_bytes = _vouched_past(view, stop) if header_checked else 0
            if durable_bytes > start:
                return read.scan(start, 0, f"{reason}, inside the first {durable_bytes} bytes, which were synced")
            return read.scan(start, end - start)
    return read.scan(start, 0, reason)
