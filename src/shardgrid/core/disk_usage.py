"""What a persistent member knows of its disk: the bytes it wrote to each file, what is not synced
yet and since when, and the free space its runtime last saw.

The core writes through ``Persist`` effects and never reads a disk, so it counts for itself: every
file starts empty or at the size a restart read back, grows by each append and becomes one write
long at each replacement. The runtime adds what only it can see, the file system's free bytes,
with each ``Synced``. From that the member says how it stands (``shardgrid status``) and refuses
writes before its disk is full (``DISK_FULL``), rather than stop at the first write the disk
refuses: a member stopped for a full disk stops serving what it holds, and its replicas are then
rebuilt on members whose disks are as full.
"""

from __future__ import annotations

from collections import deque

from shardgrid.core.effects import DiskFile, WriteMode
from shardgrid.core.errors import invariant

UNKNOWN_FREE_BYTES = -1  # ``Synced.free_bytes`` from a runtime that did not look


class DiskUsage:
    """One member's count of its disk. One owner: the member's context (its ``persist``); the
    member passes on what its runtime reports."""

    __slots__ = (
        "_file_bytes",
        "_free_bytes",
        "_next_bytes",
        "_reported_at_written_bytes",
        "_unsynced_ms",
        "synced",
        "written",
        "written_bytes",
    )

    def __init__(self) -> None:
        self._file_bytes: dict[DiskFile, int] = dict.fromkeys(DiskFile, 0)
        self._next_bytes: dict[DiskFile, int] = dict.fromkeys(DiskFile, 0)  # a compaction's next file
        self.written = 0  # Persist effects emitted since the member started (``Synced`` counts them)
        self.synced = 0  # of which the runtime said this many are durable
        self.written_bytes = 0  # their bytes
        # When each write not yet synced was emitted, oldest first: as many as a sync's wait holds.
        self._unsynced_ms: deque[int] = deque()
        self._free_bytes = UNKNOWN_FREE_BYTES
        self._reported_at_written_bytes = 0

    def restored(self, file_bytes: dict[DiskFile, int]) -> None:
        """The files as a restart read them back (what was torn off them already cut)."""
        for file, size_bytes in file_bytes.items():
            self._file_bytes[file] = size_bytes

    def wrote(self, file: DiskFile, size_bytes: int, *, mode: WriteMode, now_ms: int) -> int:
        """A write emitted: its number among the member's writes."""
        self._unsynced_ms.append(now_ms)
        self.written += 1
        self.written_bytes += size_bytes
        if mode is WriteMode.APPEND:
            self._file_bytes[file] += size_bytes
        elif mode is WriteMode.REPLACE:
            self._file_bytes[file] = size_bytes
            self._next_bytes[file] = 0  # (a replacement discards a next file being built)
        elif mode is WriteMode.BEGIN_NEXT:
            self._next_bytes[file] = size_bytes
        elif mode is WriteMode.APPEND_NEXT:
            self._next_bytes[file] += size_bytes
        elif mode is WriteMode.ADOPT_NEXT:
            self._file_bytes[file], self._next_bytes[file] = self._next_bytes[file], 0
        else:
            self._next_bytes[file] = 0
        return self.written

    def reported(self, persisted: int, free_bytes: int) -> None:
        """The runtime's ``Synced``: its first ``persisted`` writes are durable, and the file
        system has ``free_bytes`` free after them (``UNKNOWN_FREE_BYTES``: not looked at)."""
        invariant(persisted <= self.written, f"{persisted} writes synced of {self.written} emitted")
        while self.synced < persisted:
            self.synced += 1
            self._unsynced_ms.popleft()
        if free_bytes != UNKNOWN_FREE_BYTES:
            self._free_bytes = free_bytes
            self._reported_at_written_bytes = self.written_bytes

    @property
    def disk_bytes(self) -> int:
        """The member's files' bytes, as it wrote them (the next files being built included)."""
        return sum(self._file_bytes.values()) + sum(self._next_bytes.values())

    def file_bytes(self, file: DiskFile) -> int:
        """One file's bytes, and the next file's being built beside it."""
        return self._file_bytes[file] + self._next_bytes[file]

    @property
    def unsynced_writes(self) -> int:
        return self.written - self.synced

    def sync_lag_ms(self, now_ms: int) -> int:
        """How long the oldest write not yet durable has waited (0: every write is)."""
        return now_ms - self._unsynced_ms[0] if self._unsynced_ms else 0

    @property
    def free_bytes(self) -> int:
        """The file system's free bytes as last reported, less what the member wrote since
        (``UNKNOWN_FREE_BYTES`` before any report): a rewrite's old file is counted until the
        next report says it is gone."""
        if self._free_bytes == UNKNOWN_FREE_BYTES:
            return UNKNOWN_FREE_BYTES
        return max(0, self._free_bytes - (self.written_bytes - self._reported_at_written_bytes))

    def short_of_bytes(self, reserve_bytes: int, rewrite_bytes: int) -> int:
        """How far the free space is below what the member keeps: ``reserve_bytes``, and room for
        a whole rewrite of ``rewrite_bytes`` (0: it has that room, or its runtime never said)."""
        free = self.free_bytes
        if free == UNKNOWN_FREE_BYTES:
            return 0
        return max(0, reserve_bytes + rewrite_bytes - free)
