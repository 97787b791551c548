"""Moving some maps of a partition in bounded chunks: one sender and one receiver for migrations
and replica syncs alike.

Both move data the same way (seed 002's fragmented migration), with the same messages
(``TransferChunk``, ``TransferAck``): map by map, each chunk carrying its map's replica version
and a page of its records with their metadata, dumped straight from the engine (those maps take
no writes until the transfer ends), with a window of chunks in flight and cumulative
acknowledgements. Between two acknowledgements the member serves everything else. With fragments
off, the whole transfer goes out at once, as Hazelcast does with them disabled. What differs is
what starts a transfer and what its end means: that is the migration participant's and the
replica syncs' (``member/migration_participant.py``, ``member/replica_sync.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from shardgrid._engine import ColumnError
from shardgrid.core.config import MemberConfig
from shardgrid.core.identity import MemberId
from shardgrid.core.messages import TransferChunk, TransferKind
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.records import RESERVED_RECORD_BYTES, MapRecords, chunk_problem, page_count
from shardgrid.core.store import PartitionData, Piece, stream_pieces
from shardgrid.core.write_records import WriterRecord, WriterRecords, records_problem

# With fragments off, a transfer is not windowed: every chunk is sent at once, up to this many
# (a partition of more than this many chunks still moves, this many at a time).
MAX_BLOCK_CHUNKS = 4_096
# The room a member's transfers may make ahead of their records in all, unfilled (``Staging._size``):
# a bound of its own on what senders' counts can make it set aside, memory limit or none.
MAX_ROOM_AHEAD_BYTES = 256 * 1024 * 1024

M = TypeVar("M")


def window_chunks(window_chunks: int, fragments_enabled: bool) -> int:
    """Chunks in flight per transfer: the configured window, or a whole block."""
    return window_chunks if fragments_enabled else MAX_BLOCK_CHUNKS


@dataclass(slots=True)
class SendWindow(Generic[M]):
    """The sender's side: pieces not built yet, and the chunks sent and not yet acknowledged."""

    source: Iterator[Piece] | None
    ahead: Piece | None
    window: dict[int, M] = field(default_factory=dict)
    next_index: int = 0

    @classmethod
    def open(cls, maps: Sequence[tuple[str, int, MapRecords]], max_entries: int, max_bytes: int) -> SendWindow[M]:
        source = stream_pieces(maps, max_entries, max_bytes)
        return cls(source, next(source))

    def fill(
        self, limit: int, build: Callable[[int, Piece, bool], M], allow: Callable[[], bool] | None = None
    ) -> list[M]:
        """Build chunks until ``limit`` are in flight (and while ``allow()`` says another may go);
        returns the new ones (to send).

        Raises RuntimeError when a map changed under the stream (never expected: its writes wait).
        """
        built: list[M] = []
        while self.ahead is not None and len(self.window) < limit and (allow is None or allow()):
            piece = self.ahead
            self.ahead = next(self.source, None) if self.source is not None else None
            chunk = build(self.next_index, piece, self.ahead is None)
            self.window[self.next_index] = chunk
            self.next_index += 1
            built.append(chunk)
        return built

    def acknowledge(self, upto: int) -> tuple[bool, bool]:
        """Forget the chunks up to ``upto``; returns (whether that was progress, whether the
        last chunk was among them)."""
        done = [index for index in self.window if index <= upto]
        for index in done:
            del self.window[index]
        finished = bool(done) and self.ahead is None and not self.window
        return bool(done), finished

    def outstanding(self) -> list[M]:
        return [self.window[index] for index in sorted(self.window)]

    def close(self) -> None:
        self.source = None
        self.ahead = None
        self.window = {}


@dataclass(slots=True)
class Throttle:
    """A token bucket over bytes: ``bytes_per_s`` on average, in bursts of at most one second's
    worth; 0 lets everything through. A chunk may overdraw it (a chunk never waits for more than
    the bucket can hold); the next waits until the debt is paid."""

    bytes_per_s: int
    tokens: float = 0.0
    at_ms: int = 0

    def allows(self, now_ms: int) -> bool:
        if self.bytes_per_s <= 0:
            return True
        elapsed_ms = max(0, now_ms - self.at_ms)
        self.tokens = min(float(self.bytes_per_s), self.tokens + self.bytes_per_s * elapsed_ms / 1000)
        self.at_ms = now_ms
        return self.tokens > 0

    def spend(self, nbytes: int) -> None:
        if self.bytes_per_s > 0:
            self.tokens -= nbytes


@dataclass(slots=True, kw_only=True)
class OutgoingTransfer:
    """The sender's side of one transfer: what every chunk says of it, the window of chunks in
    flight, and when they last went. Its owner (a migration, a sync) decides when it starts and
    what its end means."""

    kind: TransferKind
    transfer_id: str
    partition_id: int
    target: MemberId
    stream: SendWindow[TransferChunk]
    replica_sequence: int
    lineage: str
    versions_from: int
    migration: MigrationRecord | None = None
    base_sequence: int = -1
    last_sent_ms: int = 0
    # The receiver acknowledged a chunk: it knows the transfer and keeps what comes within the
    # window, so from then on only a lost connection loses a chunk (before, it may not have taken
    # its start yet and drop them: those are resent every retry_interval_ms).
    heard: bool = False

    def chunk(self, index: int, piece: Piece, last: bool, writers: WriterRecords) -> TransferChunk:
        map_name, version, page, entries = piece
        return TransferChunk(
            kind=self.kind,
            transfer_id=self.transfer_id,
            partition_id=self.partition_id,
            sequence=index,
            map_name=map_name,
            records=page,
            last=last,
            replica_sequence=self.replica_sequence,
            lineage=self.lineage,
            map_version=version,
            map_entries=entries,
            versions_from=self.versions_from,
            writers=writers,
            migration=self.migration,
            base_sequence=self.base_sequence,
        )

    def fill(
        self,
        config: MemberConfig,
        now_ms: int,
        writers: Callable[[], WriterRecords],
        send: Callable[[MemberId, TransferChunk], None],
        allow: Callable[[], bool] | None = None,
        built: Callable[[TransferChunk], None] | None = None,
    ) -> None:
        """Send new chunks until the window is full (and while ``allow()`` lets another go); the
        last carries the partition's ``writers()``. ``built`` sees each chunk (for counts).

        Raises RuntimeError when a map changed under the stream (never expected: its writes wait).
        """

        def build(index: int, piece: Piece, last: bool) -> TransferChunk:
            chunk = self.chunk(index, piece, last, writers() if last else ())
            if built is not None:
                built(chunk)
            return chunk

        limit = window_chunks(config.migration_window_chunks, config.migration_fragments_enabled)
        chunks = self.stream.fill(limit, build, allow)
        if chunks:
            self.last_sent_ms = now_ms
        for chunk in chunks:
            send(self.target, chunk)

    def resend(self, now_ms: int, send: Callable[[MemberId, TransferChunk], None]) -> int:
        """Send the chunks in flight again; how many."""
        self.last_sent_ms = now_ms
        outstanding = self.stream.outstanding()
        for chunk in outstanding:
            send(self.target, chunk)
        return len(outstanding)

    def resend_due(self, now_ms: int, config: MemberConfig) -> bool:
        """Whether the chunks in flight are owed again: unacknowledged past ``transfer_resend_ms``
        once the receiver answered, past ``retry_interval_ms`` before."""
        waits_ms = config.transfer_resend_ms if self.heard else config.retry_interval_ms
        return now_ms - self.last_sent_ms >= waits_ms

    def acknowledge(self, upto: int) -> tuple[bool, bool]:
        """The receiver holds every chunk up to ``upto``: (whether that was progress, whether the
        transfer is done)."""
        self.heard = True
        return self.stream.acknowledge(upto)


def transfer_problem(chunk: TransferChunk) -> str:
    """What makes a chunk from a peer unfit to stage ('' when nothing): its records, as the
    engine takes them, and the writes it says the partition applied."""
    if problem := chunk_problem(chunk.map_name, chunk.records):
        return problem
    if chunk.writers and (problem := records_problem(chunk.writers)):
        return problem
    if (chunk.kind is TransferKind.MIGRATION) != (chunk.migration is not None):
        return "a migration's chunk names its migration, and only a migration's"
    return ""


@dataclass(slots=True, kw_only=True)
class Staging:
    """The receiver's side: the maps taken so far, in order, and chunks held past a gap. A chunk
    is checked (``records.page_problem``) before it is given here: loading it cannot fail."""

    maps: dict[str, MapRecords] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    early: dict[int, TransferChunk] = field(default_factory=dict)  # after a gap, within the window
    next_index: int = 0
    complete: bool = False
    replica_sequence: int = 0
    lineage: str = ""
    versions_from: int = 0
    writers: tuple[WriterRecord, ...] = ()  # the last chunk's
    hash_seed: int = 0  # the member's (``PartitionData.hash_seed``)
    max_idle_ms: Mapping[str, int] = field(default_factory=dict)  # per map (``PartitionData.max_idle_ms``)
    # Whether this many bytes more of room ahead may be made (``DataPath.room_to_size``): a map's
    # table is sized at once for the records its sender says come only then (None: never).
    fits: Callable[[int], bool] | None = None
    sized: dict[str, int] = field(default_factory=dict)  # records each sized map has room for

    def receive(self, chunk: TransferChunk, window: int) -> None:
        if not self.complete and self.next_index < chunk.sequence < self.next_index + window:
            self.early[chunk.sequence] = chunk
        current: TransferChunk | None = chunk
        while current is not None and current.sequence == self.next_index and not self.complete:
            if page_count(current.records):
                records = self.maps.get(current.map_name)
                if records is None:
                    records = self.maps[current.map_name] = MapRecords(
                        current.map_name, self.hash_seed, self.max_idle_ms.get(current.map_name, 0)
                    )
                    records.load(current.records)
                    self._size(records, current.map_entries)
                else:
                    records.load(current.records)
                self.versions[current.map_name] = current.map_version
            self.next_index += 1
            self.complete = current.last
            if current.last:
                self.writers = current.writers
            self.replica_sequence = current.replica_sequence
            self.lineage = current.lineage
            self.versions_from = current.versions_from
            current = self.early.pop(self.next_index, None)
        if self.complete:
            self.early.clear()
            self._fit()

    def _size(self, records: MapRecords, entries: int) -> None:
        """Room for the rest of a map's records (``entries`` in all, its first page loaded): its
        table then grows no more while they come (a table that doubles its way up rehashes every
        key each time: a third of a destination's load of 100,000 records). Only as far as
        ``fits`` allows with the room the member's other transfers made and have not filled: a
        sender that overstates its count makes room that stays idle until the transfer ends
        (``_fit``), never more than fits. Making room is only a speed-up: when the allocator
        cannot give it, the records come all the same (found by an outside tester: the engine's
        refusal, uncaught, ended the member)."""
        more = entries - len(records)
        if more <= 0 or self.fits is None or not self.fits(more * RESERVED_RECORD_BYTES):
            return
        try:
            records.reserve(more)
        except ColumnError:
            return
        self.sized[records.name] = len(records) + more

    def _fit(self) -> None:
        """Give back the room a sized map did not fill (its sender overstated its count), so no
        installed copy keeps room its memory count does not show (found by an outside tester)."""
        for name in self.sized:
            self.maps[name].fit()
        self.sized.clear()

    def room_ahead_bytes(self) -> int:
        """The room made ahead for records that have not come yet (0 once the transfer is whole)."""
        return sum(max(0, room - len(self.maps[name])) for name, room in self.sized.items()) * RESERVED_RECORD_BYTES

    @property
    def held_through(self) -> int:
        """The cumulative acknowledgement: every chunk up to this one is staged (-1: none)."""
        return self.next_index - 1

    def data(self, now_ms: int) -> PartitionData:
        """The staged maps as a whole copy of the partition, with the writes it applied."""
        data = PartitionData(
            maps=self.maps,
            sequence=self.replica_sequence,
            lineage=self.lineage,
            versions=self.versions,
            versions_from=self.versions_from,
            hash_seed=self.hash_seed,
            max_idle_ms=self.max_idle_ms,
        )
        data.writes.install(self.writers, now_ms)
        return data
