"""The framing of everything a member writes to its disk: checksummed records, one after another.

A record is ``length (u32) | crc32 (u32) | kind (u8) | payload``, little-endian, the CRC-32 taken
over the length, the kind and the payload, so a flipped bit anywhere in a record is caught (etcd's
WAL and Kafka's log batches frame theirs the same way). Pure bytes in, records out: the runtime
reads and writes the files, the simulator keeps them in memory, and both scan them with this.

Reading a file tells apart two kinds of damage, since they call for different answers:

- A **torn tail**: the process stopped while the last records were being written, so the file
  ends inside a record (its header or its payload cut short), or in a record that fails its
  checksum followed by nothing but zeros (a file system that grew the file before the data
  reached it). Nothing after it was ever acknowledged as durable; the scan stops there and says
  how many bytes it dropped.
- **Corruption**: a record fails its checksum, or states a length no writer writes, and real
  bytes follow it. What was acknowledged may be gone; the member must say which file and where,
  and refuse to serve what it cannot trust.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

from shardgrid.core.errors import invariant

HEADER = struct.Struct("<IIB")  # length, crc32, kind


class RecordKind(enum.IntEnum):
    """What a record holds; a file holds the kinds of one concern. Never reuse or renumber one."""

    RAFT_WRITE = 1  # one Raft step's RaftWrite (codec.encode_raft_write)


MAX_RECORD_BYTES = 64 * 1024 * 1024  # one record: a Raft snapshot or a chunk of a partition, with room


@dataclass(frozen=True, slots=True)
class Scan:
    """What a file holds: its records (kind, payload) up to the first damage, and the damage."""

    records: tuple[tuple[int, bytes], ...]
    valid_bytes: int  # the length of the intact prefix: where the next record goes
    torn_bytes: int  # bytes of a torn tail after it (0 when the file ends cleanly)
    corrupt: str  # why the file is corrupt at ``valid_bytes`` ('' when it is not)


def encode_record(kind: int, payload: bytes) -> bytes:
    invariant(0 <= kind < 256, lambda: f"record kind {kind} is not a byte")
    invariant(len(payload) <= MAX_RECORD_BYTES, lambda: f"a {len(payload)}-byte record is over the limit")
    length = struct.pack("<I", len(payload))
    crc = zlib.crc32(payload, zlib.crc32(bytes([kind]), zlib.crc32(length)))
    return HEADER.pack(len(payload), crc, kind) + payload


def scan_records(data: bytes | bytearray | memoryview) -> Scan:
    """Every intact record of ``data``, in order, and what stopped the scan."""
    view = memoryview(data)
    records: list[tuple[int, bytes]] = []
    position = 0
    end = len(view)
    while position < end:
        if end - position < HEADER.size:
            return Scan(tuple(records), position, end - position, "")  # a header cut short
        length, crc, kind = HEADER.unpack_from(view, position)
        body_start = position + HEADER.size
        if length > MAX_RECORD_BYTES:  # a whole length field no writer wrote: not a torn write
            return Scan(tuple(records), position, 0, f"a record states {length} bytes, over {MAX_RECORD_BYTES}")
        if body_start + length > end:
            return Scan(tuple(records), position, end - position, "")  # a payload cut short
        payload = view[body_start : body_start + length]
        expected = zlib.crc32(payload, zlib.crc32(bytes([kind]), zlib.crc32(view[position : position + 4])))
        if crc != expected:
            if _only_zeros(view[body_start + length :]):
                return Scan(tuple(records), position, end - position, "")  # the last write, torn
            return Scan(tuple(records), position, 0, "a record fails its checksum and records follow it")
        records.append((kind, bytes(payload)))
        position = body_start + length
    return Scan(tuple(records), position, 0, "")


def _only_zeros(view: memoryview) -> bool:
    return view.tobytes().count(0) == len(view)
