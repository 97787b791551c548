"""A member's disk in the simulator: named files of bytes that keep, across a crash, only what was
synced.

What a process wrote but did not sync is what a power cut or a SIGKILL before ``fsync`` takes:
at a crash it is gone, except that the last writes may survive in part (a torn write): a random
prefix of the unsynced bytes, as a page cache flushed half-way leaves it, or all of them but one
sector the disk never wrote (zeros), as a power cut may write later sectors and not earlier ones.
A file replaced (written whole elsewhere, then renamed over the old one) is the new file once
synced, and the old one if the crash comes first. Each sync leaves a sync marker after what it
made durable, unsynced itself, as the runtime's files do (``disk_records``). The randomness is the
run's generator, handed in at the crash, so a seed replays exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from shardgrid.core.disk_records import SECTOR_BYTES, sync_marker
from shardgrid.core.effects import WriteMode
from shardgrid.core.identity import MemberId

NEXT_SUFFIX = ".new"  # a compaction's next file, as the runtime names it


@dataclass(slots=True)
class SimDisk:
    _synced: dict[str, bytes] = field(default_factory=dict)
    _unsynced: dict[str, bytearray] = field(default_factory=dict)  # appended since the last sync
    _replaced: dict[str, bytes] = field(default_factory=dict)  # a whole new file, not yet synced
    _written: set[str] = field(default_factory=set)  # files appended to since the last sync (a marker aside)
    syncs: int = 0
    torn_writes: int = 0
    # What the member file names (a process writes it whole, synced, when an identity starts, when
    # it rejoins as a new member, and when the cluster renamed it at a new address): kept apart
    # from the files, whose sizes the disk's capacity counts.
    identity: MemberId | None = None

    def read(self, name: str) -> bytes:
        """What the running process sees of the file: everything it wrote."""
        base = self._replaced.get(name, self._synced.get(name, b""))
        return base + bytes(self._unsynced.get(name, b""))

    def size_bytes(self) -> int:
        """What the files take, every write counted (a replacement and the file it replaces both,
        until it is synced)."""
        names = set(self._synced) | set(self._unsynced) | set(self._replaced)
        replaced = sum(len(data) for data in self._replaced.values())
        return replaced + sum(len(self._synced.get(n, b"")) + len(self._unsynced.get(n, b"")) for n in names)

    def durable(self, name: str) -> bytes:
        """What a crash now would leave of the file, at the least."""
        return self._synced.get(name, b"")

    def write(self, name: str, data: bytes, mode: WriteMode) -> None:
        """Carry out a ``Persist`` as a member process's runtime does. A compaction's next file
        (``name.next``) is synced and renamed into place at once when adopted (the runtime does so
        before it goes on), and removed at a restart (``restarted``)."""
        following = name + NEXT_SUFFIX
        if mode is WriteMode.APPEND:
            self.append(name, data)
        elif mode is WriteMode.REPLACE:
            self.discard(following)
            self.replace(name, data)
        elif mode is WriteMode.BEGIN_NEXT:
            self.discard(following)
            self.append(following, data)
        elif mode is WriteMode.APPEND_NEXT:
            self.append(following, data)
        elif mode is WriteMode.ADOPT_NEXT:
            self.syncs += 1
            self._synced[name] = self.read(following)
            self._unsynced.pop(name, None)
            self._replaced.pop(name, None)
            self._written.discard(name)
            self.discard(following)
            self._mark_synced(name)
        else:
            self.discard(following)

    def discard(self, name: str) -> None:
        for files in (self._synced, self._unsynced, self._replaced):
            files.pop(name, None)
        self._written.discard(name)

    def restarted(self) -> None:
        """A process opened the directory: what a compaction left beside a file is removed."""
        for name in [n for n in (*self._synced, *self._unsynced, *self._replaced) if n.endswith(NEXT_SUFFIX)]:
            self.discard(name)

    def append(self, name: str, data: bytes) -> None:
        self._unsynced.setdefault(name, bytearray()).extend(data)
        self._written.add(name)

    def replace(self, name: str, data: bytes) -> None:
        self._replaced[name] = data
        self._unsynced.pop(name, None)
        self._written.discard(name)

    def truncate(self, name: str, length: int) -> None:
        """Cut a torn tail off (as the runtime does when it opens a file): made durable at once."""
        self.sync()
        self._unsynced.pop(name, None)  # a marker of the bytes cut off
        self._synced[name] = self._synced.get(name, b"")[:length]
        self._mark_synced(name)

    def sync(self) -> None:
        if not self._written and not self._replaced:
            return  # nothing but markers waits
        self.syncs += 1
        marked = self._written | set(self._replaced)
        for name, data in self._replaced.items():
            self._synced[name] = data
        self._replaced.clear()
        for name, data in self._unsynced.items():
            self._synced[name] = self._synced.get(name, b"") + bytes(data)
        self._unsynced.clear()
        self._written.clear()
        for name in sorted(marked):
            self._mark_synced(name)

    def _mark_synced(self, name: str) -> None:
        """What the runtime appends once a sync returned: the file's bytes so far are durable."""
        self._unsynced.setdefault(name, bytearray()).extend(sync_marker(len(self._synced.get(name, b""))))

    def crash(self, rng: random.Random, tear: bool) -> None:
        """The process died: unsynced writes are lost; with ``tear``, a prefix of each file's
        unsynced bytes survives (and a pending replacement may or may not have happened)."""
        if tear:
            lost = set()  # replacements that did not happen: what was appended after them neither
            for name in sorted(self._replaced):
                if rng.random() < 0.5:
                    self._synced[name] = self._replaced[name]
                else:
                    lost.add(name)
            for name in sorted(self._unsynced):
                if name in lost:
                    continue
                data = self._unsynced[name]
                base = self._synced.get(name, b"")
                if rng.random() < 0.5:
                    kept = rng.randrange(len(data) + 1)
                    if kept:
                        self.torn_writes += 1
                        self._synced[name] = base + bytes(data[:kept])
                    continue
                whole = bytearray(base + bytes(data))
                first = len(base) // SECTOR_BYTES
                sector = rng.randrange(first, (len(whole) - 1) // SECTOR_BYTES + 1)
                low, high = max(sector * SECTOR_BYTES, len(base)), min((sector + 1) * SECTOR_BYTES, len(whole))
                whole[low:high] = bytes(high - low)  # the sector as it was: zeros past the old end
                self.torn_writes += 1
                self._synced[name] = bytes(whole)
        self._replaced.clear()
        self._unsynced.clear()
        self._written.clear()
