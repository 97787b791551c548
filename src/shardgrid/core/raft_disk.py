"""Raft's file on a member's disk: each step's write as one record, read back into the storage
the writes add up to.

One record per ``RaftWrite`` makes each step atomic on the disk: a torn last record drops the
whole step (its term, vote, entries and commit point together), never half of it, and no message
of that step was sent. Reading stops at a torn tail (dropped: it was never durable) and refuses a
corrupt file, or one whose records add up to what no server could have left (``CorruptDisk``).

Raft is generic in what its entries carry, and so is its file: a member's writes are encoded by
the codec (``encode_raft_write``), the Raft tests' toy commands by a codec of their own.
"""

from __future__ import annotations

from collections.abc import Callable

from shardgrid.core.codec import decode_raft_write, encode_raft_write
from shardgrid.core.disk_records import (
    RecordKind,
    Scan,
    encode_record,
    frees_enough,
    refuse_corrupt,
    scan_records,
    worth_measuring,
)
from shardgrid.core.errors import CorruptDisk
from shardgrid.core.limits import MAX_ENTRIES_PER_RAFT_WRITE
from shardgrid.core.raft.storage import RaftStorage, RaftWrite

# A Raft file is rewritten whole (the storage as it is) once it holds this many times what that
# takes, and at least REWRITE_ABOVE_BYTES: the disk holds a small multiple of the log.
REWRITE_FACTOR = 4
REWRITE_ABOVE_BYTES = 1024 * 1024

Encode = Callable[[RaftWrite], bytes]
Decode = Callable[[bytes], RaftWrite]  # raises CorruptDisk for what no server wrote


def raft_record(write: RaftWrite, encode: Encode = encode_raft_write) -> bytes:
    return encode_record(RecordKind.RAFT_WRITE, encode(write))


def storage_record(storage: RaftStorage, encode: Encode = encode_raft_write) -> bytes:
    """The whole storage as writes (its entries a bounded number a record, its hard state last):
    what a compacted file holds, written whole by a replacement, never torn half-way."""
    entries = storage.entries
    chunks = [
        entries[start : start + MAX_ENTRIES_PER_RAFT_WRITE]
        for start in range(0, len(entries), MAX_ENTRIES_PER_RAFT_WRITE)
    ]
    writes = [
        RaftWrite(snapshot=storage.snapshot if number == 0 else None, entries_from=chunk[0].index, entries=tuple(chunk))
        for number, chunk in enumerate(chunks)
    ]
    if not writes:
        writes = [RaftWrite(snapshot=storage.snapshot)]
    writes.append(RaftWrite(hard_state=storage.hard_state))
    return b"".join(raft_record(write, encode) for write in writes if not write.empty)


def load_raft(
    data: bytes | bytearray | memoryview, name: str = "the Raft file", decode: Decode = decode_raft_write
) -> tuple[RaftStorage, Scan]:
    """The storage ``data`` holds and the scan that read it (its torn tail, if any)."""
    scan = scan_records(data)
    return raft_storage(scan, name, decode), scan


def raft_storage(scan: Scan, name: str = "the Raft file", decode: Decode = decode_raft_write) -> RaftStorage:
    """The storage a scanned file holds (a ``RecordFile`` opened hands its scan over as it is)."""
    refuse_corrupt(scan, name)
    storage = RaftStorage()
    for number, (kind, payload) in enumerate(scan.records):
        if kind != RecordKind.RAFT_WRITE:
            raise CorruptDisk(f"{name}: record {number} is of kind {kind}, not a Raft write")
        write = decode(payload)
        problem = storage.write_problem(write)
        if problem:
            raise CorruptDisk(f"{name}: record {number} cannot follow the ones before it: {problem}")
        storage.apply(write)
    problem = storage.problem()
    if problem:
        raise CorruptDisk(f"{name} holds what no Raft server could have written: {problem}")
    return storage


class RaftFile:
    """What a member's Raft file holds (``storage``) and the bytes that bring it there: each write
    appended as a record, until the file holds ``REWRITE_FACTOR`` times what the storage takes
    written whole; then the write replaces the file with the storage whole. A server's first
    write replaces whatever file was there: it starts the log afresh (a new member, or one that
    rejoined with a new identity), so nothing of another identity's log is read back with it."""

    def __init__(
        self, storage: RaftStorage | None = None, file_bytes: int = 0, encode: Encode = encode_raft_write
    ) -> None:
        self.storage = storage if storage is not None else RaftStorage()
        self.file_bytes = file_bytes
        self._whole_bytes = file_bytes
        self._replace_next = storage is None
        self._measured_file_bytes = file_bytes  # the file's size when a rewrite was last built
        self._encode = encode

    def record(self, write: RaftWrite, room_bytes: int | None = None, *, tight: bool = False) -> tuple[bytes, bool]:
        """The bytes that make ``write`` durable, and whether they replace the file. A rewrite
        that would not fit in ``room_bytes`` (the disk's free space; None: not known) waits, the
        write appended instead. On a ``tight`` disk the file is rewritten sooner, once that frees a
        quarter of it (measured at most once for each eighth the file grows by)."""
        self.storage.apply(write)
        data = raft_record(write, self._encode)
        if self._replace_next:
            return self._rewritten(storage_record(self.storage, self._encode)), True
        limit = max(REWRITE_ABOVE_BYTES, REWRITE_FACTOR * self._whole_bytes)
        due = self.file_bytes + len(data) > limit
        regrown = worth_measuring(self.file_bytes - self._measured_file_bytes, self.file_bytes)
        if (due and room_bytes is None) or ((due or tight) and regrown):
            self._measured_file_bytes = self.file_bytes
            whole = storage_record(self.storage, self._encode)
            fits = room_bytes is None or len(whole) <= room_bytes
            if fits and (due or frees_enough(self.file_bytes + len(data), len(whole))):
                return self._rewritten(whole), True
        self.file_bytes += len(data)
        return data, False

    def _rewritten(self, whole: bytes) -> bytes:
        self.file_bytes = self._whole_bytes = self._measured_file_bytes = len(whole)
        self._replace_next = False
        return whole
