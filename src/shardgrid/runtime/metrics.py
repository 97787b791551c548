"""Prometheus metrics of a member process (prometheus-client), served on ``metrics_port``.

Everything is observed from what the runtime already moves, so the core stays free of metric
code: a client's request and the member's reply to it give the operations and latencies per map;
the migration and sync chunks the member sends give the entries and bytes moved; its ``Emit``
effects give migrations finished and failed; its status, read on the event loop once a second,
gives partitions, replicas, migrations in flight and replicas out of sync. The scrape thread
only reads the registry, never the member.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from shardgrid.core import messages as m
from shardgrid.core.effects import DiskFile
from shardgrid.core.events import MigrationEvent, MigrationPhase
from shardgrid.core.records import page_count

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
Series = TypeVar("Series", Counter, Histogram)
MAX_MAP_LABELS = 256  # maps beyond this many share the label "(other)": a label per map is a series each


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSpec:
    """What a metric is, as the manual lists it (``shardgrid.cli.reference``)."""

    name: str
    kind: str  # counter, gauge or histogram
    documentation: str
    labels: tuple[str, ...] = ()

    @property
    def exposed_name(self) -> str:
        """The name a scraper sees: a counter's ends in ``_total``."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


class MemberMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.specs: list[MetricSpec] = []
        self.operations = self._counter(
            "shardgrid_map_operations",
            "Keys handled by map requests, by map, operation and reply code.",
            ("map", "op", "code"),
        )
        self.latency = self._histogram(
            "shardgrid_map_request_seconds",
            "Time from a map request's arrival to the member's reply (backup acknowledgements included).",
            ("map", "op"),
        )
        self.migrations_finished = self._counter("shardgrid_migrations_finished", "Migrations this member saw finish.")
        self.migrations_failed = self._counter("shardgrid_migrations_failed", "Migrations this member saw fail.")
        self.migrations_in_flight = self._gauge(
            "shardgrid_migrations_in_flight", "Partitions this member sends or receives now."
        )
        self.entries_moved = self._counter(
            "shardgrid_migration_entries_sent", "Entries sent in migration and replica-sync chunks.", ("kind",)
        )
        self.bytes_moved = self._counter(
            "shardgrid_migration_bytes_sent", "Frame bytes of migration and replica-sync chunks sent.", ("kind",)
        )
        self.partitions_owned = self._gauge("shardgrid_partitions_owned", "Partitions this member owns.")
        self.backup_replicas = self._gauge("shardgrid_backup_replicas", "Backup replicas this member holds.")
        self.replicas_out_of_sync = self._gauge(
            "shardgrid_replica_syncs_in_flight", "Replica syncs this member sends or receives."
        )
        self.writes_awaiting_backups = self._gauge(
            "shardgrid_writes_awaiting_backups", "Writes not yet acknowledged by every backup."
        )
        self.memory_bytes = self._gauge(
            "shardgrid_memory_bytes", "Bytes of records this member holds, as the storage engine counts them."
        )
        self.max_memory_bytes = self._gauge(
            "shardgrid_max_memory_bytes", "This member's max_memory_bytes (0: no limit): past it, writes are refused."
        )
        self.entries = self._gauge("shardgrid_entries", "Records this member holds, of every replica.")
        self.entries_evicted = self._counter(
            "shardgrid_entries_evicted", "Entries this member evicted as owner, by its maps' eviction_policy."
        )
        self._entries_evicted_seen = 0
        self.map_entries = self._gauge(
            "shardgrid_map_entries", "Records of one map this member holds, of every replica.", ("map",)
        )
        self.map_memory_bytes = self._gauge(
            "shardgrid_map_memory_bytes",
            "Bytes of one map's records this member holds, as the engine counts them.",
            ("map",),
        )
        self._maps_shown: set[str] = set()
        self.connections = self._gauge("shardgrid_connections", "Open connections by kind.", ("kind",))
        self.client_frame_bytes_claimed = self._gauge(
            "shardgrid_client_frame_bytes_claimed",
            "Bytes of part-read client frames claimed from client_frame_budget_bytes.",
        )
        self.client_frames_waiting = self._gauge(
            "shardgrid_client_frames_waiting",
            "Client connections whose part-read frame waits for the frame budget (their reading paused).",
        )
        self.connections_refused = self._counter(
            "shardgrid_connections_refused", "Connections closed for bad input or a failed handshake."
        )
        self.frames_dropped = self._counter(
            "shardgrid_frames_dropped", "Frames to peers dropped (unreachable, stale incarnation).", ("reason",)
        )
        self.links_restored = self._counter(
            "shardgrid_links_restored", "Connections to peers back after a loss: unacknowledged frames resent."
        )
        self.notices_dropped = self._counter(
            "shardgrid_event_notices_dropped", "Events not pushed to a listening client that did not keep up."
        )
        self.disk_sync_seconds = self._histogram(
            "shardgrid_disk_sync_seconds",
            "Time a sync of the data directory took (one for all a loop turn wrote; persistent members).",
        )
        self.disk_bytes = self._gauge(
            "shardgrid_disk_bytes", "Bytes of the data directory's files (persistent members)."
        )
        self.disk_file_bytes = self._gauge(
            "shardgrid_disk_file_bytes",
            "Bytes of one file of the data directory: raft (the log and snapshot) or replicas.",
            ("file",),
        )
        self.disk_free_bytes = self._gauge(
            "shardgrid_disk_free_bytes",
            "Free bytes of the data directory's file system (-1: not readable). Under disk_reserve_bytes plus "
            "room to rewrite the member's records, writes are refused (DISK_FULL).",
        )
        self.disk_unsynced_writes = self._gauge(
            "shardgrid_disk_unsynced_writes", "The member's writes to its data directory not yet synced."
        )
        self.disk_sync_lag_seconds = self._gauge(
            "shardgrid_disk_sync_lag_seconds", "How long the oldest write not yet synced has waited."
        )
        self._maps: set[str] = set()
        # Per (map, operation): its latency series and its "ok" count, each looked up once
        # (``labels`` checks and locks at every call: a tenth of a member's work on a single get
        # was metrics). Bounded: MAX_MAP_LABELS maps times the operations.
        self._latency_series: dict[tuple[str, str], Histogram] = {}
        self._ok_series: dict[tuple[str, str], Counter] = {}

    def on_sync(self, seconds: float, file_bytes: Mapping[DiskFile, int], free_bytes: int) -> None:
        if seconds:
            self.disk_sync_seconds.observe(seconds)
        self.disk_bytes.set(sum(file_bytes.values()))
        for file, size_bytes in file_bytes.items():
            self.disk_file_bytes.labels(file.value).set(size_bytes)
        self.disk_free_bytes.set(free_bytes)

    def _spec(self, name: str, kind: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.specs.append(MetricSpec(name=name, kind=kind, documentation=documentation, labels=labels))

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
        self._spec(name, "counter", documentation, labels)
        return Counter(name, documentation, labels, registry=self.registry)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
        self._spec(name, "gauge", documentation, labels)
        return Gauge(name, documentation, labels, registry=self.registry)

    def _histogram(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Histogram:
        self._spec(name, "histogram", documentation, labels)
        return Histogram(name, documentation, labels, buckets=LATENCY_BUCKETS_S, registry=self.registry)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)

    def map_label(self, name: str) -> str:
        if name in self._maps:
            return name
        if len(self._maps) < MAX_MAP_LABELS:
            self._maps.add(name)
            return name
        return "(other)"

    def on_reply(self, map_name: str, op: str, reply: m.MapReply, seconds: float) -> None:
        key = (map_name, op)
        latency = self._latency_series.get(key)
        if latency is None:
            latency = self._series(self._latency_series, key, self.latency)
        latency.observe(seconds)
        codes = reply.codes
        ok = codes.count(m.ReplyCode.OK)
        if ok:
            succeeded = self._ok_series.get(key)
            if succeeded is None:
                succeeded = self._series(self._ok_series, key, self.operations, "ok")
            succeeded.inc(ok)
        if ok == len(codes):
            return  # the usual answer: no step per key (a loop over them was ~4% of a member's load)
        label = self.map_label(map_name)
        for status, count in collections.Counter(codes).items():
            if status != m.ReplyCode.OK:
                self.operations.labels(label, op, m.ReplyCode(status).name.lower()).inc(count)

    def _series(self, kept: dict[tuple[str, str], Series], key: tuple[str, str], metric: Series, *more: str) -> Series:
        """``metric``'s series of the map and operation ``key`` (and ``more`` labels), kept in
        ``kept`` unless the map shares the label "(other)" (those are looked up each time)."""
        map_name, op = key
        label = self.map_label(map_name)
        series = metric.labels(label, op, *more)
        if label == map_name:
            kept[key] = series
        return series

    def on_sent(self, message: object, frame_bytes: int) -> None:
        kind = type(message)
        if kind is m.TransferChunk:
            label = message.kind.value  # type: ignore[attr-defined]  # "migration" or "sync"
            self.entries_moved.labels(label).inc(page_count(message.records))  # type: ignore[attr-defined]
            self.bytes_moved.labels(label).inc(frame_bytes)

    def on_event(self, event: object) -> None:
        if isinstance(event, MigrationEvent):
            if event.phase is MigrationPhase.FINISHED:
                self.migrations_finished.inc()
            elif event.phase is MigrationPhase.FAILED:
                self.migrations_failed.inc()

    def on_status(self, status: m.MemberStatus) -> None:
        self.disk_unsynced_writes.set(status.unsynced_writes)
        self.disk_sync_lag_seconds.set(status.sync_lag_ms / 1000)
        self.migrations_in_flight.set(status.migrations_here)
        self.partitions_owned.set(status.owned_partitions)
        self.backup_replicas.set(status.backup_replicas)
        self.replicas_out_of_sync.set(status.syncs_in_flight)
        self.writes_awaiting_backups.set(status.writes_awaiting_backups)
        self.memory_bytes.set(status.memory_bytes)
        self.max_memory_bytes.set(status.max_memory_bytes)
        self.entries.set(status.entries)
        # The status counts since the member started; the counter takes what is new since.
        self.entries_evicted.inc(max(0, status.entries_evicted - self._entries_evicted_seen))
        self._entries_evicted_seen = status.entries_evicted
        shown = set()
        for usage in status.maps:
            self.map_entries.labels(usage.map_name).set(usage.entries)
            self.map_memory_bytes.labels(usage.map_name).set(usage.memory_bytes)
            shown.add(usage.map_name)
        for gone in self._maps_shown - shown:  # a map this member no longer holds is no series
            self.map_entries.remove(gone)
            self.map_memory_bytes.remove(gone)
        self._maps_shown = shown
