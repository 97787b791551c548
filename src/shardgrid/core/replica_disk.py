"""The replicas' file on a persistent member's disk: every partition copy it holds, as images and
the write runs applied since, and read back into copies at a restart.

Records, in the order the member changed its copies (``RecordKind``):

- a **run**: a ``WriteRun`` as this copy applied it (the owner's own writes, or a backup's from
  its owner), from a position: the columns the wire carried, not converted entry by entry;
- an **image**: a copy whole (its lineage, sequence, versions and the writes it remembers), then
  its maps' records in pages as the engine dumps them, the last page marked; the copy is replaced;
- a **header**: the copy's lineage, sequence, slot and versions, and the maps it still holds (the
  others are dropped): what a promotion or a move to a colder slot changes, without its records;
- a **drop**: the member no longer holds the partition;
- a **staged** image: what a migration's destination committed to (``MigrationCommit``), kept
  apart from its copies until the log says the migration's outcome, and its drop;
- a **step's end**: the records since the last one are one step's, taken whole or not at all.

One step's records are written together, after the step (``ReplicaJournal.take``): the runs it
applied, then an image, header or drop of each copy it changed otherwise, from the copy as the
step left it (so a run of a copy imaged in the same step is not written twice), then its end. A
step cut short is at the file's torn tail: it was never durable (nothing it led to was sent), and
the copies are as before it, never half-way through it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from shardgrid._engine import DUMP_RECORD_BYTES, ColumnError
from shardgrid.core.config import DEFAULT_COMPACTION_BYTES_PER_STEP, DEFAULT_COMPACTION_MIN_BYTES
from shardgrid.core.disk_records import (
    COMPACT_EARLY_ABOVE_BYTES,
    RecordKind,
    Scan,
    encode_record,
    frees_enough,
    refuse_corrupt,
    worth_measuring,
)
from shardgrid.core.effects import WriteMode
from shardgrid.core.errors import CorruptDisk, ShardgridError
from shardgrid.core.limits import MAX_BACKUP_COUNT, MAX_ENTRIES_PER_CHUNK, MAX_MAP_NAME_CHARS
from shardgrid.core.messages import ChunkMapName, PartitionId, RecordColumns, WriteRun
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.records import MapRecords, page_problem
from shardgrid.core.store import PartitionData
from shardgrid.core.wire import Counter, Record
from shardgrid.core.write_records import WriterRecords, records_problem

# An image's pages: the bound the engine's dump keeps (entries, and bytes beyond its metadata).
IMAGE_PAGE_BYTES = 4 * 1024 * 1024
# The file is compacted (written anew beside itself: an image of every copy) once it holds this
# many times what that takes, and at least the member's compaction_min_bytes.
REWRITE_FACTOR = 4
# What an image takes per entry beyond what a run carries of it (two lengths and the metadata).
IMAGE_ENTRY_BYTES = DUMP_RECORD_BYTES
# A page's record header and fields beyond its columns (its map's name among them), at most.
IMAGE_PAGE_FRAMING_BYTES = 128 + 4 * MAX_MAP_NAME_CHARS

MapNameHeld = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MAP_NAME_CHARS)]


class ReplicaRun(Record, kw_only=True):
    start: Counter  # the run's writes from this position on were applied (the rest were held)
    run: WriteRun


class ReplicaHeader(Record, kw_only=True):
    partition_id: PartitionId
    lineage: str
    sequence: Counter
    copy_index: Annotated[int, msgspec.Meta(ge=0, le=MAX_BACKUP_COUNT)]
    versions_from: Counter
    versions: tuple[tuple[MapNameHeld, Counter], ...]  # per map held with a version
    maps: tuple[MapNameHeld, ...]  # the maps the copy holds (a header drops the others)
    image: bool = False  # the maps' pages follow: the copy is replaced by them
    writers: WriterRecords = ()  # an image's: the clients' writes the copy remembers
    migration: MigrationRecord | None = None  # a staged image's migration


class ReplicaPage(Record, kw_only=True):
    partition_id: PartitionId
    map_name: ChunkMapName  # "" in the one page of an image of no records
    records: RecordColumns
    last: bool


class ReplicaDrop(Record, kw_only=True):
    partition_id: PartitionId
    staged: bool = False  # the staged image is dropped, not the copy


_ENCODER = msgspec.msgpack.Encoder()
_DECODERS: dict[int, msgspec.msgpack.Decoder] = {
    RecordKind.REPLICA_RUN: msgspec.msgpack.Decoder(ReplicaRun),
    RecordKind.REPLICA_HEADER: msgspec.msgpack.Decoder(ReplicaHeader),
    RecordKind.REPLICA_PAGE: msgspec.msgpack.Decoder(ReplicaPage),
    RecordKind.REPLICA_DROP: msgspec.msgpack.Decoder(ReplicaDrop),
}


def _record(kind: RecordKind, value: Record) -> bytes:
    return encode_record(kind, _ENCODER.encode(value))


STEP_END = encode_record(RecordKind.REPLICA_STEP_END, b"")


def _header(
    pid: int, data: PartitionData, *, image: bool, now_ms: int, migration: MigrationRecord | None = None
) -> ReplicaHeader:
    return ReplicaHeader(
        partition_id=pid,
        lineage=data.lineage,
        sequence=data.sequence,
        copy_index=data.copy_index,
        versions_from=data.versions_from,
        versions=tuple(sorted(data.versions.items())),
        maps=tuple(name for name, records in data.maps.items() if records),
        image=image,
        writers=data.writes.snapshot(now_ms) if image else (),
        migration=migration,
    )


def image_records(pid: int, data: PartitionData, now_ms: int, migration: MigrationRecord | None = None) -> bytes:
    """The copy whole: its header, then its maps' records page by page, the last page marked."""
    header = _header(pid, data, image=True, now_ms=now_ms, migration=migration)
    parts = [_record(RecordKind.REPLICA_HEADER, header)]
    pages: list[tuple[str, RecordColumns]] = []
    for name, records in data.maps.items():
        pages.extend((name, page) for page in records.pages(MAX_ENTRIES_PER_CHUNK, IMAGE_PAGE_BYTES))
    if not pages:
        pages.append(("", RecordColumns()))
    for number, (name, page) in enumerate(pages):
        last = number == len(pages) - 1
        parts.append(
            _record(RecordKind.REPLICA_PAGE, ReplicaPage(partition_id=pid, map_name=name, records=page, last=last))
        )
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class _Whole:
    """A rewrite of the replicas file, built: its bytes, and each copy's and staged copy's share."""

    data: bytes
    copy_bytes: dict[int, int]
    staged_bytes: dict[int, int]

    @property
    def size_bytes(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class JournalWrite:
    """What a step writes: ``data`` to the replicas file as ``mode`` says (``WriteMode``)."""

    data: bytes
    mode: WriteMode = WriteMode.APPEND


@dataclass(slots=True)
class _Part:
    """One record group of a step: a run, or an image, header or drop, of a copy or a staged copy."""

    staged: bool
    pid: int
    whole: bool  # an image or a drop: all a rewrite would hold of it (a run or a header adds to it)
    data: bytes


@dataclass(slots=True)
class _Build:
    """A compaction in progress: the replicas file written anew beside itself (its next file), a
    bounded share a step. The next file holds the copies (and staged copies) in ``copies`` and
    ``staged``: each imaged there (or dropped, or created after the build began), and each step's
    records for them since; the others are still to image, ``pending``."""

    pending: deque[int]
    staged_pending: deque[int]
    copies: set[int] = field(default_factory=set)
    staged: set[int] = field(default_factory=set)
    copy_bytes: dict[int, int] = field(default_factory=dict)  # what the next file holds of each
    staged_bytes: dict[int, int] = field(default_factory=dict)
    bound_bytes: int = 0  # what the next file takes at most, as measured when the build began
    file_bytes: int = 0
    begun: bool = False

    def count(self, part: _Part) -> None:
        counts = self.staged_bytes if part.staged else self.copy_bytes
        counts[part.pid] = len(part.data) if part.whole else counts.get(part.pid, 0) + len(part.data)


class ReplicaJournal:
    """What one step changed in the copies a member holds, kept until ``take`` writes it; and
    the size of the file, so that it is compacted once it holds mostly what was replaced.

    The data path tells it of every change (``run``, ``image``, ``header``); a change it misses
    is a copy the disk does not hold as the member does, which the simulator's disk check finds.
    A journal that starts a member's file afresh (``fresh``) rewrites it whole at its first take.

    Compaction is by bounded steps (``_Build``): once the file holds REWRITE_FACTOR times what a
    rewrite would (or sooner when the disk is short of room), the file is written anew beside
    itself, ``share_bytes`` of images a step, while each step still goes whole to the
    file itself, and the next file replaces it once it holds every copy. A member never stalls
    for a rewrite of everything it holds; a crash on the way restarts from the file itself.

    It also keeps, per copy, the bytes written for it since its last image (a run's entries each
    counted with the metadata an image gives it): their sum estimates what a rewrite would write
    (``live_bytes``; made exact whenever a compaction ends), so that one is begun only when the
    disk has room for it, and the member knows what room to keep."""

    def __init__(
        self,
        *,
        fresh: bool,
        file_bytes: int = 0,
        min_bytes: int = DEFAULT_COMPACTION_MIN_BYTES,
        share_bytes: int = DEFAULT_COMPACTION_BYTES_PER_STEP,
    ) -> None:
        self._min_bytes = min_bytes  # the file is compacted only past this (compaction_min_bytes)
        self._share_bytes = share_bytes  # images a step writes to the next file, at most
        self._runs: list[tuple[WriteRun, int]] = []
        self._changed: set[int] = set()  # an image or a drop, whichever the copy ends the step as
        self._headers: set[int] = set()
        # Per partition, the data a migration's destination committed to (None: dropped).
        self._staged: dict[int, tuple[MigrationRecord, PartitionData] | None] = {}
        self.staged: dict[int, tuple[MigrationRecord, PartitionData]] = {}  # what the file holds staged
        self._fresh = fresh  # the next take must rewrite the file, whatever the room
        self.file_bytes = file_bytes
        self._whole_bytes = file_bytes
        # Bytes written for each copy (and staged copy) since its image; a file read back at a
        # restart is counted whole until its first compaction.
        self._copy_bytes: dict[int, int] = {}
        self._staged_bytes: dict[int, int] = {}
        self._live_bytes = file_bytes
        self._measured_file_bytes = file_bytes  # the file's size when a compaction last began
        self._build: _Build | None = None
        # Whether the last take held write runs only (no image, header, drop or staged data): what
        # a member that syncs them on a timer lets its sends go ahead of.
        self.took_runs_only = False

    def restored(self, copies: Mapping[int, PartitionData], now_ms: int) -> None:
        """The copies a file read back at a restart holds: what compacting it would write is
        measured from them (at most), not taken as the whole file (found by an outside tester:
        a file killed at 6 MB grew to 25 MB before it compacted, four times its size then)."""
        bound = min(self.file_bytes, self._image_bound(copies, now_ms))
        self._whole_bytes = self._live_bytes = bound

    @property
    def live_bytes(self) -> int:
        """About what a rewrite of the file would write now (each copy's last image and what was
        appended for it since; a step not taken yet is not counted)."""
        return self._live_bytes

    @property
    def compacting(self) -> bool:
        return self._build is not None

    def run(self, run: WriteRun, start: int) -> None:
        self._runs.append((run, start))

    def image(self, pid: int) -> None:
        self._changed.add(pid)

    def header(self, pid: int) -> None:
        self._headers.add(pid)

    def stage(self, pid: int, migration: MigrationRecord, data: PartitionData) -> None:
        self._staged[pid] = (migration, data)

    def unstage(self, pid: int) -> None:
        if pid in self.staged or pid in self._staged:
            self._staged[pid] = None

    def restaged(self, pid: int, migration: MigrationRecord, data: PartitionData) -> None:
        """Staged data read back at a restart: the file holds it already."""
        self.staged[pid] = (migration, data)

    def take(
        self, stores: Mapping[int, PartitionData], now_ms: int, room_bytes: int | None = None, *, short: bool = False
    ) -> list[JournalWrite]:
        """The writes of this step's changes: appended to the file, and while a compaction runs
        (or one begins: the file is due for one, or the member is ``short`` of disk and it grew an
        eighth since the last), its share to the next file. A compaction begins only when
        ``live_bytes`` fits in ``room_bytes`` (the disk's free space; None: not known), and is
        dropped when the room left would not take its next share."""
        if self._fresh:
            return [JournalWrite(self._rewritten(self._whole(stores, now_ms)), WriteMode.REPLACE)]
        parts = self._step_parts(stores, now_ms)
        writes = []
        if parts:
            data = b"".join(part.data for part in parts) + STEP_END
            self.file_bytes += len(data)
            writes.append(JournalWrite(data))
        if self._build is None:
            bound = self._compaction_due(stores, now_ms, room_bytes, short)
            if bound is not None:
                pending, staged_pending = deque(sorted(stores)), deque(sorted(self.staged))
                self._build = _Build(pending=pending, staged_pending=staged_pending, bound_bytes=bound)
        if self._build is not None:
            writes.extend(self._build_step(self._build, parts, stores, now_ms, room_bytes))
        return writes

    def _compaction_due(
        self, stores: Mapping[int, PartitionData], now_ms: int, room_bytes: int | None, short: bool
    ) -> int | None:
        """Whether a compaction begins now: at most what its next file will take, or None. Due (the
        file holds REWRITE_FACTOR times what a rewrite would, by the count), it begins when the
        count fits in ``room_bytes``; short of room, or due without room by the count, it measures
        what a rewrite would take at most (once for each eighth the file grows by: bounded work),
        and begins when that fits and frees enough."""
        due = self.file_bytes > max(self._min_bytes, REWRITE_FACTOR * self._whole_bytes)
        counted = self._live_bytes + len(STEP_END)
        if due and (room_bytes is None or counted <= room_bytes):
            return counted
        regrown = worth_measuring(self.file_bytes - self._measured_file_bytes, self._live_bytes)
        if not ((due or short) and regrown and self.file_bytes >= COMPACT_EARLY_ABOVE_BYTES):
            return None
        self._measured_file_bytes = self.file_bytes
        bound = min(counted, self._image_bound(stores, now_ms))
        if room_bytes is not None and bound > room_bytes:
            return None
        return bound if due or frees_enough(self.file_bytes, bound) else None

    def _image_bound(self, stores: Mapping[int, PartitionData], now_ms: int) -> int:
        """At most what every copy's image (and staged copy's) takes: each header as it would be
        written, each record as the engine counts its memory (more than its image takes), and the
        pages' framing."""
        copies = [(pid, data, None) for pid, data in stores.items()]
        copies += [(pid, data, migration) for pid, (migration, data) in self.staged.items()]
        total = len(STEP_END)
        for pid, data, migration in copies:
            header = _header(pid, data, image=True, now_ms=now_ms, migration=migration)
            records = sum(len(held) for held in data.maps.values())
            pages = records // MAX_ENTRIES_PER_CHUNK + len(data.maps) + 1
            total += len(_record(RecordKind.REPLICA_HEADER, header)) + pages * IMAGE_PAGE_FRAMING_BYTES
            total += sum(held.memory_bytes() for held in data.maps.values())
        return total

    def _step_parts(self, stores: Mapping[int, PartitionData], now_ms: int) -> list[_Part]:
        """This step's records, a group per copy change, counted towards ``live_bytes``."""
        changed = self._changed
        self.took_runs_only = not changed and not self._headers and not self._staged
        parts: list[_Part] = []
        for run, start in self._runs:
            pid = run.partition_id
            if pid not in changed:
                data = _record(RecordKind.REPLICA_RUN, ReplicaRun(start=start, run=run))
                parts.append(_Part(staged=False, pid=pid, whole=False, data=data))
                self._count(self._copy_bytes, pid, len(data) + len(run.keys) * IMAGE_ENTRY_BYTES, whole=False)
        for pid in sorted(changed | self._headers):
            copy = stores.get(pid)
            if copy is None:
                data = _record(RecordKind.REPLICA_DROP, ReplicaDrop(partition_id=pid))
                parts.append(_Part(staged=False, pid=pid, whole=True, data=data))
                self._count(self._copy_bytes, pid, 0, whole=True)
            elif pid in changed:
                data = image_records(pid, copy, now_ms)
                parts.append(_Part(staged=False, pid=pid, whole=True, data=data))
                self._count(self._copy_bytes, pid, len(data), whole=True)
            else:
                data = _record(RecordKind.REPLICA_HEADER, _header(pid, copy, image=False, now_ms=now_ms))
                parts.append(_Part(staged=False, pid=pid, whole=False, data=data))
                self._count(self._copy_bytes, pid, len(data), whole=False)
        for pid, staged in sorted(self._staged.items()):
            if staged is None:
                data = _record(RecordKind.REPLICA_DROP, ReplicaDrop(partition_id=pid, staged=True))
                parts.append(_Part(staged=True, pid=pid, whole=True, data=data))
                self._count(self._staged_bytes, pid, 0, whole=True)
            else:
                data = image_records(pid, staged[1], now_ms, staged[0])
                parts.append(_Part(staged=True, pid=pid, whole=True, data=data))
                self._count(self._staged_bytes, pid, len(data), whole=True)
        self._note_staged()
        self._clear()
        return parts

    def _build_step(
        self,
        build: _Build,
        parts: list[_Part],
        stores: Mapping[int, PartitionData],
        now_ms: int,
        room_bytes: int | None,
    ) -> list[JournalWrite]:
        """A compaction's share of this step: the step's records of what the next file holds (an
        image or a drop takes a copy there at once), then images of the next copies still to
        image, ``share_bytes`` at most; once it holds every copy, it replaces the file."""
        out: list[bytes] = []
        for part in parts:
            held = build.staged if part.staged else build.copies
            if part.pid in held or part.whole:
                held.add(part.pid)
                out.append(part.data)
                build.count(part)
        budget = self._share_bytes
        for staged, pending, held, source in (
            (False, build.pending, build.copies, stores),
            (True, build.staged_pending, build.staged, self.staged),
        ):
            while pending and budget > 0:
                pid = pending.popleft()
                if pid in held or pid not in source:
                    continue
                if staged:
                    migration, copy = self.staged[pid]
                    data = image_records(pid, copy, now_ms, migration)
                else:
                    data = image_records(pid, stores[pid], now_ms)
                held.add(pid)
                out.append(data)
                build.count(_Part(staged=staged, pid=pid, whole=True, data=data))
                budget -= len(data)
        for pending, held, source in (
            (build.pending, build.copies, stores),
            (build.staged_pending, build.staged, self.staged),
        ):
            if not pending:
                # Copies made since the build began (a copy made empty, then written) are imaged
                # too, before the next file is taken (found by an outside tester: one made during
                # a build was left out, and the file then refused the runs that followed).
                pending.extend(sorted(pid for pid in source if pid not in held))
        done = not build.pending and not build.staged_pending
        if not out and (build.begun or not done):
            return []
        data = b"".join(out) + STEP_END
        if room_bytes is not None and max(build.bound_bytes - build.file_bytes, 0) + len(data) > room_bytes:
            # No room for the next file to grow: it is dropped, and the file written on alone.
            self._build = None
            return [JournalWrite(b"", WriteMode.DISCARD_NEXT)] if build.begun else []
        writes = [JournalWrite(data, WriteMode.APPEND_NEXT if build.begun else WriteMode.BEGIN_NEXT)]
        build.file_bytes += len(data)
        build.begun = True
        if done:
            writes.append(JournalWrite(b"", WriteMode.ADOPT_NEXT))
            self._adopted(build)
        return writes

    def _adopted(self, build: _Build) -> None:
        """The next file is the file from now on: its counts are exact."""
        self._build = None
        self.file_bytes = self._whole_bytes = self._measured_file_bytes = build.file_bytes
        self._copy_bytes, self._staged_bytes = build.copy_bytes, build.staged_bytes
        self._live_bytes = sum(build.copy_bytes.values()) + sum(build.staged_bytes.values())

    def _whole(self, stores: Mapping[int, PartitionData], now_ms: int) -> _Whole:
        """The file whole as a rewrite would write it now: every copy's image and every staged
        copy's (this step's staging included)."""
        staged = dict(self.staged)
        for pid, change in self._staged.items():
            if change is None:
                staged.pop(pid, None)
            else:
                staged[pid] = change
        pids = sorted(stores)
        parts = [image_records(pid, stores[pid], now_ms) for pid in pids]
        staged_pids = sorted(staged)
        staged_parts = [image_records(pid, staged[pid][1], now_ms, staged[pid][0]) for pid in staged_pids]
        return _Whole(
            data=b"".join(parts) + b"".join(staged_parts) + STEP_END,
            copy_bytes={pid: len(part) for pid, part in zip(pids, parts, strict=True)},
            staged_bytes={pid: len(part) for pid, part in zip(staged_pids, staged_parts, strict=True)},
        )

    def _rewritten(self, whole: _Whole) -> bytes:
        """Take ``whole`` as the file from now on."""
        self.took_runs_only = False
        self._note_staged()
        self._clear()
        self._copy_bytes, self._staged_bytes = whole.copy_bytes, whole.staged_bytes
        self._fresh = False
        self._build = None
        self._live_bytes = whole.size_bytes - len(STEP_END)
        self.file_bytes = self._whole_bytes = self._measured_file_bytes = whole.size_bytes
        return whole.data

    def _count(self, counts: dict[int, int], pid: int, size_bytes: int, *, whole: bool) -> None:
        """``size_bytes`` written for a copy: all of what a rewrite would write for it (``whole``:
        an image, or 0 for a drop), or more of it (a run, a header)."""
        before = counts.get(pid, 0)
        after = size_bytes if whole else before + size_bytes
        if after:
            counts[pid] = after
        else:
            counts.pop(pid, None)
        self._live_bytes += after - before

    def _note_staged(self) -> None:
        for pid, staged in self._staged.items():
            if staged is None:
                self.staged.pop(pid, None)
            else:
                self.staged[pid] = staged

    def _clear(self) -> None:
        self._runs = []
        self._changed = set()
        self._headers = set()
        self._staged = {}


@dataclass(slots=True)
class ReplicasOnDisk:
    """What a replicas file holds: the copies, and the data migrations' destinations committed to."""

    copies: dict[int, PartitionData] = field(default_factory=dict)
    staged: dict[int, tuple[MigrationRecord, PartitionData]] = field(default_factory=dict)
    # Where the last whole step ends: what follows (a step torn off) is cut before the file is
    # written again, or the next step's end would complete it.
    whole_bytes: int = 0


Imaging = tuple[int, PartitionData, MigrationRecord | None]  # an image whose pages are being read


def load_replicas(
    scan: Scan, *, hash_seed: int, max_idle_ms: Mapping[str, int], now_ms: int = 0, name: str = "the replicas file"
) -> ReplicasOnDisk:
    """The copies a scanned replicas file holds (a step cut short at its end dropped: it was
    never durable); ``CorruptDisk`` for records no member wrote or that cannot follow."""
    refuse_corrupt(scan, name)
    held = ReplicasOnDisk()
    imaging: Imaging | None = None
    step: list[tuple[int, object]] = []
    for number, (kind, payload) in enumerate(scan.records):
        if kind == RecordKind.REPLICA_STEP_END:
            if payload:
                raise CorruptDisk(f"{name}: record {number}, a step's end, carries {len(payload)} bytes")
            for at, value in step:
                imaging = _apply_record(held, imaging, value, f"{name}: record {at}", hash_seed, max_idle_ms, now_ms)
            if imaging is not None:
                raise CorruptDisk(f"{name}: record {number} ends a step inside the image of partition {imaging[0]}")
            step = []
            held.whole_bytes = scan.ends[number]
            continue
        decoder = _DECODERS.get(kind)
        if decoder is None:
            raise CorruptDisk(f"{name}: record {number} is of kind {kind}, not a replica's")
        try:
            step.append((number, decoder.decode(payload)))
        except (msgspec.MsgspecError, ShardgridError, ValueError, TypeError) as error:
            raise CorruptDisk(f"{name}: record {number} is not one a member wrote: {error}") from error
    # Records after the last step's end: a step torn off, never durable. With none, the file is
    # whole to its end (sync markers may follow the last step).
    if not step:
        held.whole_bytes = scan.valid_bytes
    return held


def _apply_record(
    held: ReplicasOnDisk,
    imaging: Imaging | None,
    value: object,
    where: str,
    hash_seed: int,
    max_idle_ms: Mapping[str, int],
    now_ms: int,
) -> Imaging | None:
    """Apply one record of a whole step; returns the image still being read (None: none)."""
    copies = held.copies

    def fresh(**fields: object) -> PartitionData:
        return PartitionData(hash_seed=hash_seed, max_idle_ms=max_idle_ms, **fields)  # type: ignore[arg-type]

    if imaging is not None and not isinstance(value, ReplicaPage):
        raise CorruptDisk(f"{where} comes inside the image of partition {imaging[0]}")
    if isinstance(value, ReplicaRun):
        run = value.run
        data = copies.get(run.partition_id)
        if data is None:
            data = copies[run.partition_id] = fresh()
        if value.start >= max(run.write_count, 1) or run.first_sequence + value.start != data.sequence + 1:
            raise CorruptDisk(
                f"{where}: a run of partition {run.partition_id} from sequence "
                f"{run.first_sequence + value.start} after {data.sequence}"
            )
        try:
            data.apply_run(run, value.start, now_ms)
        except ColumnError as error:
            raise CorruptDisk(f"{where}: a run the engine refuses: {error}") from error
    elif isinstance(value, ReplicaHeader):
        if value.writers and (problem := records_problem(value.writers)):
            raise CorruptDisk(f"{where}: {problem}")
        if value.image:
            data = fresh(
                lineage=value.lineage,
                sequence=value.sequence,
                copy_index=value.copy_index,
                versions=dict(value.versions),
                versions_from=value.versions_from,
            )
            data.writes.install(value.writers, now_ms)
            return (value.partition_id, data, value.migration)
        if value.migration is not None:
            raise CorruptDisk(f"{where}: a staged copy's header without its image")
        data = copies.get(value.partition_id)
        if data is None:
            data = copies[value.partition_id] = fresh()
        _take_header(data, value)
    elif isinstance(value, ReplicaPage):
        if imaging is None or imaging[0] != value.partition_id:
            raise CorruptDisk(f"{where}: a page of partition {value.partition_id} outside its image")
        pid, data, migration = imaging
        if problem := page_problem(value.records):
            raise CorruptDisk(f"{where}: {problem}")
        if value.map_name:
            records = data.maps.get(value.map_name)
            if records is None:
                records = data.maps[value.map_name] = MapRecords(
                    value.map_name, hash_seed, max_idle_ms.get(value.map_name, 0)
                )
            try:
                records.load(value.records)
            except ColumnError as error:
                raise CorruptDisk(f"{where}: records the engine refuses: {error}") from error
        if value.last:
            if migration is None:
                copies[pid] = data
            else:
                held.staged[pid] = (migration, data)
            return None
    elif isinstance(value, ReplicaDrop):
        if value.staged:
            held.staged.pop(value.partition_id, None)
        else:
            copies.pop(value.partition_id, None)
    return imaging


def _take_header(data: PartitionData, header: ReplicaHeader) -> None:
    data.lineage = header.lineage
    data.sequence = header.sequence
    data.copy_index = header.copy_index
    data.versions_from = header.versions_from
    kept = set(header.maps)
    for map_name in [name for name in data.maps if name not in kept]:
        del data.maps[map_name]
    data.versions = dict(header.versions)


def images(stores: Iterable[tuple[int, PartitionData]], now_ms: int) -> bytes:
    """Every copy as an image: what a rewritten file, or a backup of the member's data, holds."""
    return b"".join(image_records(pid, data, now_ms) for pid, data in stores)
