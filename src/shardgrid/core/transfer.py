"""Moving some maps of a partition in bounded chunks: the sender's window, the receiver's staging.

Migrations and replica syncs move data the same way (seed 002's fragmented migration): map by
map, each chunk carrying its map's replica version and a page of its records with their metadata,
dumped straight from the engine (those maps take no writes until the transfer ends), with a
window of chunks in flight and cumulative acknowledgements. Between two acknowledgements the
member serves everything else. With fragments off, the whole transfer goes out at once, as
Hazelcast does with them disabled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from shardgrid.core.messages import RecordColumns
from shardgrid.core.records import MapRecords, page_count
from shardgrid.core.store import PartitionData, Piece, stream_pieces
from shardgrid.core.write_records import WriterRecord

# With fragments off, a transfer is not windowed: every chunk is sent at once, up to this many
# (a partition of more than this many chunks still moves, this many at a time).
MAX_BLOCK_CHUNKS = 4_096

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


class Chunk(Protocol):
    """What the receiver reads of a migration or sync chunk."""

    @property
    def sequence(self) -> int: ...
    @property
    def map_name(self) -> str: ...
    @property
    def records(self) -> RecordColumns: ...
    @property
    def last(self) -> bool: ...
    @property
    def replica_sequence(self) -> int: ...
    @property
    def lineage(self) -> str: ...
    @property
    def map_version(self) -> int: ...
    @property
    def versions_from(self) -> int: ...
    @property
    def writers(self) -> tuple[WriterRecord, ...]: ...


C = TypeVar("C", bound=Chunk)


@dataclass(slots=True, kw_only=True)
class Staging(Generic[C]):
    """The receiver's side: the maps taken so far, in order, and chunks held past a gap. A chunk
    is checked (``records.page_problem``) before it is given here: loading it cannot fail."""

    maps: dict[str, MapRecords] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    early: dict[int, C] = field(default_factory=dict)  # after a gap, within the window
    next_index: int = 0
    complete: bool = False
    replica_sequence: int = 0
    lineage: str = ""
    versions_from: int = 0
    writers: tuple[WriterRecord, ...] = ()  # the last chunk's
    hash_seed: int = 0  # the member's (``PartitionData.hash_seed``)
    max_idle_ms: Mapping[str, int] = field(default_factory=dict)  # per map (``PartitionData.max_idle_ms``)

    def receive(self, chunk: C, window: int) -> None:
        if not self.complete and self.next_index < chunk.sequence < self.next_index + window:
            self.early[chunk.sequence] = chunk
        current: C | None = chunk
        while current is not None and current.sequence == self.next_index and not self.complete:
            if page_count(current.records):
                records = self.maps.get(current.map_name)
                if records is None:
                    records = self.maps[current.map_name] = MapRecords(
                        current.map_name, self.hash_seed, self.max_idle_ms.get(current.map_name, 0)
                    )
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
