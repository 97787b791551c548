"""Map operations on the partition owner, their replication to backups, and the stores.

The owner serves a partition only while the member is active, its applied table names it owner,
it holds a lease, and no migration of the partition blocks it. It applies a write, gives it the
partition's next replica sequence and sends it to the backups of its table; it answers the client
only when every backup acknowledged and its lease still holds (sync backups, seed 001), so an
acknowledged write is on the owner and every backup. Backups apply writes in sequence order
(holding a bounded number that arrive early) and only from the member their table names as owner.
A write whose backups do not all answer within ``backup_ack_timeout_ms`` is reported
indeterminate, and the owner re-syncs the lagging backups: with just the maps changed since what
the backup holds (per-map replica versions), or the whole partition when that is unknown. A sync
holds back writes only to the maps it reads. The owner also syncs its backups when it becomes
owner by promotion, since the surviving backups may differ by the writes the old owner had in
flight.

A request is checked whole before any of it is applied: a malformed one changes nothing.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from shardgrid._engine import ColumnError, check_column, split
from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import (
    MAX_BACKUP_BATCH_BYTES,
    MAX_FRAME_BYTES,
    MAX_GET_ANSWER_BYTES,
    MAX_KEY_BYTES,
    MAX_MAP_NAME_CHARS,
    MAX_OPERATIONS_PER_REQUEST,
    MAX_REPLY_VALUE_BYTES,
    MAX_RUNS_PER_BACKUP_BATCH,
    MAX_TABLE_REPLY_PARTITIONS,
    MAX_TTL_MS,
    MAX_VALUE_BYTES,
)
from shardgrid.core.member.answer import Answer, Indexes
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.leases import Leases
from shardgrid.core.member.replication import PendingCall, PendingPartition, PendingWrite
from shardgrid.core.member.request_parts import Part, request_parts
from shardgrid.core.member.stand_in import StandIns
from shardgrid.core.member.upkeep import RECORD_GROWTH_BYTES, Upkeep
from shardgrid.core.messages import (
    EMPTY_COLUMN,
    ENTRY_VIEW,
    PUT,
    PUT_IF_ABSENT,
    READS,
    REMOVE,
    REMOVE_IF_SAME,
    REPLACE,
    REPLACE_IF_SAME,
    RETRYABLE,
    SET_TTL,
    WITH_TTL,
    WITH_VALUES,
    BackupAckBatch,
    BackupBatch,
    Column,
    MapReply,
    MapRequest,
    OpKind,
    PartitionRedirect,
    ReplicaSummary,
    ReplicaSyncAck,
    ReplicaSyncChunk,
    ReplicaSyncRequest,
    ReplyCode,
    ScanReply,
    ScanRequest,
    TableReply,
    TableRequest,
    WriteRun,
)
from shardgrid.core.records import EMPTY_SCAN_PAGE, chunk_problem, ttls_fit
from shardgrid.core.store import (
    PartitionData,
    Piece,
    ReplicaView,
    columns_bytes,
    counted_bytes,
    unpacked_lengths,
)
from shardgrid.core.transfer import SendWindow, Staging, window_chunks
from shardgrid.core.write_records import NO_DEADLINE_TTL_MS, RECORD_GRACE_MS, WINDOW_IDS, Seen, records_problem

# What a run takes on the wire beyond its keys, values and map name (partition, lineage, sequences).
RUN_HEADER_BYTES = 64
# Every operation a request may name (a set of its members: ``in`` takes any value, in every
# Python version, unlike ``in OpKind`` on 3.11).
KINDS = frozenset(OpKind)
# The writes whose owner decides per key whether to write: each answers the value held before.
CONDITIONAL = frozenset({PUT_IF_ABSENT, REPLACE, REPLACE_IF_SAME, REMOVE_IF_SAME, SET_TTL})
# (partition, map) pairs whose write targets are cached (the cache empties when the table changes).
MAX_CACHED_TARGETS = 100_000
# The keys and values of one request: a frame less room for what the owner's backup batch adds to
# them (its lineage and sequence), so that forwarding an accepted request always fits a frame.
MAX_REQUEST_DATA_BYTES = MAX_FRAME_BYTES - 64 * 1024


class MigrationView(Protocol):
    """What the data path asks of the migration participant."""

    def writes_blocked(self, pid: int) -> bool: ...
    def reads_blocked(self, pid: int) -> bool: ...
    def involved(self, pid: int) -> bool: ...


@dataclass(slots=True, kw_only=True)
class OutgoingSync:
    """The owner bringing one backup up to date, from ``base_sequence`` (-1: whole)."""

    sync_id: str
    partition_id: int
    backup: MemberId
    stream: SendWindow[ReplicaSyncChunk]
    maps: frozenset[str]  # the maps it reads: their writes wait until it ends
    base_sequence: int
    replica_sequence: int
    lineage: str
    versions_from: int
    last_sent_ms: int
    refused: bool = False  # the backup does not follow it: start over at the next retry
    heard: bool = False  # the backup accepted a chunk: as a migration's ``Outgoing.heard``


@dataclass(slots=True)
class IncomingSync:
    sync_id: str
    base_sequence: int
    staging: Staging[ReplicaSyncChunk]


@dataclass(frozen=True, slots=True)
class Route:
    """A map's place in a partition under one table: the partition's replicas, this member's slot
    among them, and where the map's writes go. Asked for every partition a request or a backup
    batch touches, so it is worked out once per table (``DataPath._route``)."""

    slots: Sequence[MemberId | None]  # the partition's replica slots
    index: int  # this member's slot (-1: none)
    keeps_copy: bool  # whether this member's slot keeps a copy of the map
    backups: tuple[MemberId, ...]  # every backup of the partition
    copies: tuple[MemberId, ...]  # those that keep a copy of the map (sync, then async)
    sequence_only: tuple[MemberId, ...]  # the others: they get the sequence without the data
    sync: tuple[MemberId, ...]  # those the answer waits for


@dataclass(frozen=True, slots=True)
class Scope:
    """What every partition of one client request shares, worked out once for the request."""

    call: PendingCall
    message: MapRequest
    serving: bool  # this member holds its lease and serves
    expires_ms: int  # until when a partition remembers the request's write (``_record_expiry``)
    expected: list[bytes]  # a replace_if_same's expected values, by request position
    ttl_ms: int  # how long a put's entries live, without TTLs per key (0: until removed)
    stand_in_map: bool  # the map chose availability: a stand-in may serve it
    evicts_over_size: bool  # a put is followed by evicting the map back within its sizes
    fits_whole: bool  # the whole request fits the member's memory: no partition's put is checked
    any_unavailable: bool  # some partition may be unavailable (a member is marked unreachable)
    records_ms: int  # the record clock's time now (the request is handled at one time)


class DataPath:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        leases: Leases,
        member_serves: Callable[[], bool],
        unavailable: Callable[[], ReplyCode | None],
        request_assignment: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.leases = leases
        self.member_serves = member_serves
        self.unavailable = unavailable  # NOT_READY or SHUTTING_DOWN while the member serves nothing
        self.request_assignment = request_assignment
        self.migrations: MigrationView | None = None  # wired by the member (they ask each other)
        self.stores: dict[int, PartitionData] = {}
        self.stand_ins = StandIns(ctx, consensus)
        self.pending: dict[int, PendingPartition] = {}  # owner: writes waiting for backups
        self.pending_count = 0
        self.pending_bytes = 0
        self._last_summary_ms = 0
        # This event's runs, sent at its end: to the backups that keep the map, and (without the
        # keys and values) to the partition's other backups.
        self.outbox: list[tuple[WriteRun, int, tuple[MemberId, ...], tuple[MemberId, ...]]] = []
        # Per (partition, map), its route under the current table: asked on every write and run.
        self._routes: dict[tuple[int, str], Route] = {}
        self._routes_table: object = None
        self.reorder: dict[int, dict[int, WriteRun]] = {}  # backup: runs that arrived early
        self.outgoing_syncs: dict[int, dict[MemberId, OutgoingSync]] = {}  # per partition, per backup
        self._syncs_by_id: dict[str, OutgoingSync] = {}
        self.incoming_syncs: dict[int, IncomingSync] = {}
        self._sync_counter = 0
        # The records' memory, sizes, evictions and expiry: the owner's own removals.
        self.upkeep = Upkeep(ctx, consensus, self)

    # --- what others ask ---------------------------------------------------------------------------

    def store(self, pid: int) -> PartitionData:
        data = self.stores.get(pid)
        if data is None:
            data = self.stores[pid] = PartitionData(
                hash_seed=self.ctx.hash_seed, max_idle_ms=self.ctx.config.max_idle_ms
            )
        return data

    def view(self, pid: int) -> ReplicaView | None:
        """A read-only copy of this member's replica of ``pid`` (None: it holds none)."""
        data = self.stores.get(pid)
        return data.view() if data is not None else None

    def sequence_of(self, pid: int) -> int:
        """The replica sequence this member's copy of ``pid`` is at (0: it holds none)."""
        data = self.stores.get(pid)
        return data.sequence if data is not None else 0

    def memory_bytes_of(self, pid: int) -> int:
        """What the engine counts for this member's copy of ``pid`` (0: it holds none)."""
        data = self.stores.get(pid)
        return data.memory_bytes() if data is not None else 0

    @property
    def memory_bytes(self) -> int:
        """What the engine counts for every copy this member holds, as of the last tick."""
        return self.upkeep.memory_bytes

    @property
    def entries_evicted(self) -> int:
        return self.upkeep.entries_evicted

    # --- what the upkeep asks (``upkeep.OwnerWrites``) ---------------------------------------------

    def owned_partitions(self) -> list[int]:
        table = self.consensus.state.table
        if table is None or self.migrations is None or not self.leases.holds():
            return []
        me = self.ctx.identity
        return [pid for pid in sorted(self.stores) if table.replicas[pid][0] == me]

    def blocked(self, pid: int) -> bool:
        migrations = self.migrations
        return migrations is None or self.consensus.state.unavailable(pid) or migrations.writes_blocked(pid)

    def map_blocked(self, pid: int, map_name: str) -> bool:
        if pid in self.outgoing_syncs and self._syncing(pid, map_name):
            return True
        return self.stand_ins.owner_waits(pid, map_name, self.ctx.now_ms)  # a stand-in may serve it

    def replica(self, pid: int) -> PartitionData:
        return self.stores[pid]

    def slots_of(self, pid: int) -> Sequence[MemberId | None]:
        table = self.consensus.state.table
        invariant(table is not None, "a partition's slots are asked for under a table")
        return table.replicas[pid]

    def copies_held(self) -> list[PartitionData]:
        return [*self.stores.values(), *self.stand_ins.held()]

    def held_partitions(self) -> list[int]:
        """The partitions this member holds a copy of."""
        return sorted(self.stores)

    def install(self, pid: int, data: PartitionData, index: int) -> None:
        """Take ``data`` as this member's copy of the partition, at replica ``index``, unless what
        it holds is newer in the same lineage (a replica sync may have overtaken a migration's
        staged data): a replica never goes back past writes it has applied, some acknowledged."""
        held = self.stores.get(pid)
        if held is not None and held.lineage == data.lineage and held.sequence >= data.sequence:
            if held.copy_index <= max(index, 0):
                return
            if held.sequence > data.sequence:
                # Newer, but kept for a colder slot: it lacks maps this slot keeps. Those maps
                # have had no write since the staged copy (this member takes no run of a map its
                # slot does not keep), so the staged copy of them is exact: take them from it.
                config = self.ctx.config
                for name, records in data.maps.items():
                    if name not in held.maps and not config.keeps_copy(name, held.copy_index):
                        held.maps[name] = records
                        held.versions[name] = data.version_of(name)
                held.versions_from = max(held.versions_from, data.versions_from)
                held.copy_index = max(index, 0)
                self._trim(held, index)
                return
        self._trim(data, index)
        self.stores[pid] = data
        self.reorder.pop(pid, None)
        self.incoming_syncs.pop(pid, None)

    def settled(self, pid: int) -> bool:
        """No write of the partition is still on its way to a backup, and no sync is running."""
        return pid not in self.outgoing_syncs and pid not in self.pending

    def busy(self) -> bool:
        return bool(self.pending or self.outgoing_syncs or self.incoming_syncs)

    def _backups_of(self, pid: int) -> list[MemberId]:
        table = self.consensus.state.table
        return self._backups_in(table.replicas[pid]) if table is not None else []

    def _backups_in(self, slots: Sequence[MemberId | None]) -> list[MemberId]:
        """The backups a partition's replica slots name: every one follows the partition's
        sequence, whether or not it keeps a copy of a given map."""
        return [r for r in slots[1 : self.ctx.config.table_backup_count + 1] if r is not None]

    def _route(self, pid: int, map_name: str) -> Route:
        """The map's route in ``pid`` under the current table (which the caller checked is there)."""
        table = self.consensus.state.table
        if table is not self._routes_table:
            self._routes.clear()
            self._routes_table = table
        route = self._routes.get((pid, map_name))
        if route is None:
            invariant(table is not None, "a route is asked for under a table")
            slots = table.replicas[pid]
            me = self.ctx.identity
            index = slots.index(me) if me in slots else -1
            map_config = self.ctx.config.map_config(map_name)
            sync_end = 1 + map_config.backup_count
            copies_end = sync_end + map_config.async_backup_count
            width = self.ctx.config.table_backup_count + 1  # no map's copies reach past it
            route = Route(
                slots=slots,
                index=index,
                keeps_copy=index == 0 or 0 < index <= map_config.total_backup_count,
                backups=tuple(self._backups_in(slots)),
                copies=tuple(r for r in slots[1:copies_end] if r is not None),
                sequence_only=tuple(r for r in slots[copies_end:width] if r is not None),
                sync=tuple(r for r in slots[1:sync_end] if r is not None),
            )
            if len(self._routes) >= MAX_CACHED_TARGETS:
                self._routes.clear()
            self._routes[(pid, map_name)] = route
        return route

    def _trim(self, data: PartitionData, index: int) -> None:
        """Drop the maps a replica at ``index`` keeps no copy of: it gets none of their writes, so
        a copy would only go stale (and could be promoted)."""
        if index < 1:
            return
        config = self.ctx.config
        for map_name in [name for name in data.maps if not config.keeps_copy(name, index)]:
            del data.maps[map_name]
        data.copy_index = max(data.copy_index, index)

    def _index_of(self, pid: int) -> int:
        table = self.consensus.state.table
        if table is None:
            return -1
        slots = table.replicas[pid]
        return slots.index(self.ctx.identity) if self.ctx.identity in slots else -1

    # --- client requests -------------------------------------------------------------------------

    def on_map_request(self, client: str, message: MapRequest, sent_ms: int | None = None) -> None:
        """``sent_ms``: when the client sent it, on this member's clock (no later than it was)."""
        count = len(message.keys) if len(message.keys) <= MAX_OPERATIONS_PER_REQUEST else 0
        problem, parts = self._request_problem(message)
        if problem:
            # Nothing of it is applied: every key refused, with the reason.
            codes = bytes([ReplyCode.REJECTED]) * count
            self.ctx.reply(client, MapReply(call_id=message.call_id, codes=codes, reason=problem))
            return
        if message.deadline_ms and sent_ms is not None and self.ctx.now_ms - sent_ms > message.deadline_ms:
            # Held up on its way (a partition, a kernel retransmitting it): its caller may have
            # given up and written again since. Refused whole, never applied late.
            late_ms = self.ctx.now_ms - sent_ms - message.deadline_ms
            reason = f"the attempt came {late_ms} ms after its deadline of {message.deadline_ms} ms: not applied"
            codes = bytes([ReplyCode.EXPIRED]) * count
            self.ctx.reply(client, MapReply(call_id=message.call_id, codes=codes, reason=reason))
            return
        wants_values = message.kind in READS or message.previous
        call = PendingCall(
            client_address=client,
            call_id=message.call_id,
            codes=[ReplyCode.OK] * count,
            values=Answer(count) if wants_values else None,
            redirects={},
            open_writes=0,
            deadline_ms=self.ctx.now_ms + self.ctx.config.backup_ack_timeout_ms,
        )
        refused = self._refusal(message.kind not in READS)
        if refused is not None:
            call.mark(range(count), refused)
            if refused is ReplyCode.REJECTED:
                call.reason = f"the cluster is {self.consensus.state.cluster_state.value}: it takes no writes"
        else:
            scope = self._scope(call, message, sent_ms)
            for part in parts:
                self._execute(scope, part)
            self._send_outbox()
        if call.open_writes == 0:
            self._reply(call)

    def _scope(self, call: PendingCall, message: MapRequest, sent_ms: int | None) -> Scope:
        config = self.ctx.config
        map_config = config.map_config(message.map_name)
        kind = message.kind
        writes = kind not in READS
        fits_whole = False
        if writes and not (map_config.bounded and not map_config.evicts):
            # As ``Upkeep.room_for`` counts each partition's put: every key new, its size counted.
            keys, values = message.keys, message.values
            size = counted_bytes(len(keys.data) + len(values.data), len(keys) + len(values))
            fits_whole = self.upkeep.fits(len(keys) * RECORD_GROWTH_BYTES + size)
        return Scope(
            call=call,
            message=message,
            serving=self.leases.holds() and self.migrations is not None,
            expires_ms=self._record_expiry(message, sent_ms),
            expected=message.expected.items() if kind == REPLACE_IF_SAME else [],
            ttl_ms=message.ttl_ms if message.ttl_ms >= 0 else map_config.time_to_live_ms,
            stand_in_map=message.map_name in config.serving_maps,
            evicts_over_size=map_config.evicts and map_config.bounded,
            fits_whole=fits_whole,
            any_unavailable=self.consensus.state.any_unavailable(),
            records_ms=self.ctx.records_ms,
        )

    def _record_expiry(self, message: MapRequest, sent_ms: int | None) -> int:
        """Until when a partition remembers that it applied this request's write: no attempt of
        it can arrive after its deadline (and a grace for the clocks); without one, long."""
        if message.deadline_ms and sent_ms is not None:
            return sent_ms + message.deadline_ms + RECORD_GRACE_MS
        return self.ctx.now_ms + NO_DEADLINE_TTL_MS

    def _request_problem(self, message: MapRequest) -> tuple[str, list[Part]]:
        """What makes the request unfit to serve ('' when nothing), and its keys cut by partition.
        The codec checked every field's type; the engine checks the columns whole (counts,
        lengths, each key's and value's bound) and cuts them, in one call."""
        kind, keys, values, expected = message.kind, message.keys, message.values, message.expected
        count = len(keys)
        # (The codec checked these of a request from a client; not of one built in the process.)
        if kind not in KINDS:
            return f"unknown operation {kind!r}", []
        if not 0 < len(message.map_name) <= MAX_MAP_NAME_CHARS:
            return f"a map name is 1 to {MAX_MAP_NAME_CHARS} characters", []
        if count > MAX_OPERATIONS_PER_REQUEST:
            return f"{count} keys in one request, over the limit of {MAX_OPERATIONS_PER_REQUEST}", []
        if len(values) != (count if kind in WITH_VALUES else 0):
            return "one value per key for a write of values, and none otherwise", []
        if len(expected) != (count if kind == REPLACE_IF_SAME else 0):
            return "one expected value per key for a replace_if_same (none otherwise)", []
        if message.ttl_ms >= 0 and kind not in WITH_TTL:
            return f"a TTL is a put's or a replace's, not a {kind.value}'s", []
        if message.ttls_ms:
            if kind not in WITH_TTL or message.ttl_ms >= 0:
                return "TTLs per key are a put's or a replace's, and not given with a TTL for the request", []
            if len(message.ttls_ms) != 8 * count or not ttls_fit(message.ttls_ms, count, MAX_TTL_MS):
                return f"TTLs per key are one unsigned 64-bit number per key, each at most {MAX_TTL_MS} ms", []
        data_bytes = len(keys.data) + len(values.data) + len(expected.data)
        if counted_bytes(data_bytes, count + len(values) + len(expected)) > MAX_REQUEST_DATA_BYTES:
            return f"keys and values of one request are at most {MAX_REQUEST_DATA_BYTES} bytes", []
        try:
            if expected:
                check_column(
                    expected.data, expected.lengths, max_items=count, max_item_bytes=MAX_VALUE_BYTES, what="expected"
                )
            parts = request_parts(message, self.ctx.config.partition_count)
        except ColumnError as error:
            return f"malformed columns: {error}", []
        return "", parts

    def _refusal(self, write: bool) -> ReplyCode | None:
        """Why this member serves no partition of the request now, or None: asked once per request."""
        unavailable = self.unavailable()
        if unavailable is not None:
            return unavailable
        if self.consensus.state.table is None:
            self.request_assignment()
            return ReplyCode.NOT_READY
        if write and not self.consensus.state.cluster_state.writes_allowed:
            return ReplyCode.REJECTED
        return None

    def _execute(self, scope: Scope, part: Part) -> None:
        """Serve one partition's keys of a request (``part``)."""
        call, message = scope.call, scope.message
        migrations = self.migrations
        pid, indexes, map_name = part.partition_id, part.indexes, message.map_name
        if scope.stand_in_map and self.stand_ins.serves(pid, map_name):
            self._execute_standing_in(scope, part)
            return
        kind = message.kind
        route = self._route(pid, map_name)
        slots = route.slots
        owner = slots[0]
        me = self.ctx.identity
        reading = kind in READS
        if owner != me and reading and scope.serving and self._read_from_backup(call, message, part, route):
            return
        moving = migrations is not None and migrations.writes_blocked(pid)
        if owner == me and scope.serving and not scope.any_unavailable and not moving:
            refusal = None  # what ``_owner_refusal`` answers in this case, asked for every partition
        else:
            refusal = self._owner_refusal(pid, scope.serving, reading, owner)
        if refusal is None and scope.stand_in_map and self.stand_ins.owner_waits(pid, map_name, self.ctx.now_ms):
            refusal = ReplyCode.NOT_READY, None  # a stand-in may still serve the map: see stand_in
        if refusal is not None:
            self._mark_refused(call, pid, indexes, refusal)
            return
        data = self.stores.get(pid)
        if data is None:
            data = self.store(pid)
        if reading:
            self._read_into(call, message, data, part)
            return
        if moving or (pid in self.outgoing_syncs and self._syncing(pid, map_name)):
            call.mark(indexes, ReplyCode.MIGRATING)
            return
        named = bool(message.client_id and message.write_id)
        if named and not self._first_time(call, message, pid, data, indexes):
            return
        unit = indexes  # the request's keys of this partition, answered as one
        out = call.values
        if kind is PUT:
            run_keys, run_values, size = part.keys, part.values, part.size_bytes
            ttls_ms = (
                part.ttls_ms if message.ttls_ms or not scope.ttl_ms else self._uniform_ttls(scope.ttl_ms, len(run_keys))
            )
        else:
            run_keys, run_values, size, ttls_ms = part.keys, EMPTY_COLUMN, part.size_bytes, b""
        if kind in CONDITIONAL:
            chosen, run_keys, run_values, ttls_ms = self._conditioned(data, scope, part)
            if self._answer_too_large(call, message, unit):
                return
            if not chosen:
                # No key meets its condition: nothing is written, each answered OK (and remembered,
                # so that a retry is answered the same whatever was written since).
                if named:
                    self._remember(data, message, unit, out, scope.expires_ms)
                return
            indexes = [unit[position] for position in chosen] if len(chosen) < len(unit) else unit
            kind = REMOVE if kind == REMOVE_IF_SAME else PUT
            size = columns_bytes(run_keys, run_values)
            if message.kind == SET_TTL and self._renewal_too_large(call, message, unit, size):
                return
        config = self.ctx.config
        written = len(run_keys)
        if self.pending_count + written > config.max_pending_writes or (
            self.pending_bytes + size > config.max_pending_write_bytes
        ):
            call.mark(indexes, ReplyCode.OVERLOADED)
            return
        # After the backlog's check: a write refused OVERLOADED (retried) takes no memory allowance
        # (found by an outside tester: five OVERLOADED refusals made the next write MEMORY_FULL).
        if (
            kind is PUT
            and not (scope.fits_whole and message.kind is PUT)
            and not self._make_room(call, message, pid, data, slots, unit, run_keys, run_values, size)
        ):
            return
        first = data.sequence + 1
        written_ms = scope.records_ms
        # A conditional write's answer is what it was judged on (``_conditioned``): an eviction for
        # its room may have taken the key since, and the put's own previous value would then say
        # the key held nothing (found by the simulator: a compare-and-set answered "not swapped"
        # though it was applied).
        answered = None if message.kind in CONDITIONAL else out
        self.upkeep.changed(_apply(data, map_name, kind, indexes, answered, run_keys, run_values, written_ms, ttls_ms))
        answer = self._remember(data, message, unit, out, scope.expires_ms) if named else None
        if not route.backups:
            if kind is PUT and scope.evicts_over_size:
                self.upkeep.evict_over_size(pid, data, map_name, slots)
            return
        run = WriteRun(
            partition_id=pid,
            lineage=data.lineage,
            first_sequence=first,
            kind=kind,
            map_name=map_name,
            keys=run_keys,
            values=run_values,
            client_id=message.client_id if named else "",
            write_id=message.write_id if named else 0,
            record_ttl_ms=max(0, scope.expires_ms - self.ctx.now_ms) if named else 0,
            answer=answer,
            written_ms=written_ms,
            ttls_ms=ttls_ms,
        )
        self.outbox.append((run, size, route.copies, route.sequence_only))
        pending = self.pending.get(pid)
        if pending is None:
            pending = self.pending[pid] = PendingPartition(required=set(route.backups), last_sent_ms=self.ctx.now_ms)
        if route.sync:  # async backups only: nobody is waited on (the run is still resent until they have it)
            self._wait_for_backups(pending, call, first, data.sequence, indexes, route.sync, size)
        if kind is PUT and scope.evicts_over_size:
            self.upkeep.evict_over_size(pid, data, map_name, slots)

    @staticmethod
    def _uniform_ttls(ttl_ms: int, count: int) -> bytes:
        """``count`` entries' TTL of ``ttl_ms`` each, packed (empty: until removed)."""
        return ttl_ms.to_bytes(8, "little") * count if ttl_ms else b""

    def _wait_for_backups(
        self,
        pending: PendingPartition,
        call: PendingCall,
        first: int,
        last: int,
        indexes: Indexes,
        backups: tuple[MemberId, ...],
        size: int,
    ) -> None:
        """The call's answer waits until ``backups`` acknowledge the writes ``first..last``."""
        pending.writes.append(
            PendingWrite(
                first_sequence=first,
                last_sequence=last,
                call=call,
                indexes=indexes,
                backups=backups,
                size_bytes=size,
            )
        )
        self.pending_count += len(indexes)
        self.pending_bytes += size
        call.open_writes += 1

    def _execute_standing_in(self, scope: Scope, part: Part) -> None:
        """A request of a map that chose availability, in an unavailable partition: served by its
        stand-in (``stand_in``) from the entries written there since, with no backups."""
        call, message = scope.call, scope.message
        pid, indexes = part.partition_id, part.indexes
        refusal = self.stand_ins.refusal(pid, scope.serving)
        if refusal is not None:
            self._mark_refused(call, pid, indexes, refusal)
            return
        data = self.stand_ins.store(pid)
        if message.kind in READS:
            self._read_into(call, message, data, part)
            return
        named = bool(message.client_id and message.write_id)
        if named and not self._first_time(call, message, pid, data, indexes):
            return
        unit, kind, out = indexes, message.kind, call.values
        run_keys, run_values, size = part.keys, part.values if kind == PUT else EMPTY_COLUMN, part.size_bytes
        ttls_ms = b""
        if kind == PUT:
            ttls_ms = part.ttls_ms if message.ttls_ms else self._uniform_ttls(scope.ttl_ms, len(run_keys))
        if kind in CONDITIONAL:
            chosen, run_keys, run_values, ttls_ms = self._conditioned(data, scope, part)
            kind = REMOVE if kind == REMOVE_IF_SAME else PUT
            if self._answer_too_large(call, message, unit):
                return
            indexes = [unit[position] for position in chosen]
            size = columns_bytes(run_keys, run_values)
            if chosen and message.kind == SET_TTL and self._renewal_too_large(call, message, unit, size):
                return
        if indexes:
            if kind == PUT and not self._make_room(call, message, pid, data, None, unit, run_keys, run_values, size):
                return
            answered = None if message.kind in CONDITIONAL else out
            self.upkeep.changed(
                _apply(
                    data, message.map_name, kind, indexes, answered, run_keys, run_values, self.ctx.records_ms, ttls_ms
                )
            )
            if kind == PUT:
                self.upkeep.evict_over_size(pid, data, message.map_name, None)
        if named:
            self._remember(data, message, unit, out, scope.expires_ms)

    def _mark_refused(
        self, call: PendingCall, pid: int, indexes: Indexes, refusal: tuple[ReplyCode, PartitionRedirect | None]
    ) -> None:
        status, redirect = refusal
        call.mark(indexes, status)
        if redirect is not None:
            call.redirects[pid] = redirect
        if status is ReplyCode.UNAVAILABLE:
            call.reason = self._unavailable_reason(pid)

    def _first_time(self, call: PendingCall, message: MapRequest, pid: int, data: PartitionData, unit: Indexes) -> bool:
        """Whether this partition has not applied the request's write yet (``write_records``).
        When it has, the keys get the first answer again and nothing is applied: OK once the write
        is on every sync backup (as the first answer waited for), SETTLING until then; a write too
        old to tell is refused, as is a client this partition has no room to remember."""
        now = self.ctx.now_ms
        if data.writes.refused(message.client_id, message.write_id, now):
            call.mark(unit, ReplyCode.MEMORY_FULL)
            call.reason = self.upkeep.memory_full_reason()
            return False
        seen, writer = data.writes.seen(message.client_id, message.write_id, now)
        if seen is Seen.NEW:
            if data.writes.room_for(message.client_id, now):
                return True
            call.mark(unit, ReplyCode.OVERLOADED)  # every client it remembers may still retry
            return False
        if seen is Seen.TOO_OLD or writer is None:
            call.mark(unit, ReplyCode.REJECTED)
            call.reason = (
                f"write {message.write_id} is older than the {WINDOW_IDS} latest writes of this client partition "
                f"{pid} remembers: whether it was applied cannot be told, and it is not applied now"
            )
            return False
        answer = writer.answers.get(message.write_id)
        applied_through = answer.last_sequence if answer is not None else writer.forgotten_sequence
        if not self._acknowledged_through(pid, data, applied_through):
            call.mark(unit, ReplyCode.SETTLING)
            return False
        if call.values is not None:
            kept = answer.values if answer is not None else None
            if kept is None or len(kept) != len(unit):
                call.mark(unit, ReplyCode.REJECTED)
                call.reason = f"write {message.write_id} was applied already; its answer is no longer kept"
                return False
            call.values.put_items(list(unit), kept)
        return False  # answered OK, as the codes already say

    def _acknowledged_through(self, pid: int, data: PartitionData, sequence: int) -> bool:
        """Whether every write of the partition up to ``sequence`` is on every sync backup: none
        of them waits for an acknowledgement, and no sync is bringing a backup back."""
        if pid in self.outgoing_syncs:
            return False
        pending = self.pending.get(pid)
        return pending is None or not pending.writes or pending.writes[0].first_sequence > sequence

    @staticmethod
    def _remember(
        data: PartitionData, message: MapRequest, unit: Indexes, out: Answer | None, expires_ms: int
    ) -> tuple[bytes | None, ...] | None:
        """Record the request's write as applied to the partition; returns its answer's values."""
        answer = out.items_at(unit) if out is not None else None
        data.writes.record(message.client_id, message.write_id, data.sequence, answer, expires_ms)
        return answer

    def _conditioned(self, data: PartitionData, scope: Scope, part: Part) -> tuple[list[int], Column, Column, bytes]:
        """A conditional write of ``part``'s keys, judged key by key: the positions in the part of
        the keys to write (those whose live value meets the condition, in order; a key named
        twice is judged on what the write before left), and the run that writes them: its keys,
        values and TTLs. Every key is answered the value it held before (when the caller asked for
        values); a put-if-absent whose key it wrote earlier in the request answers that earlier
        value; a set_ttl answers b"" for a key it holds, and writes the value held again.
        Looking counts no read, and each distinct key is copied out of the engine once."""
        message, out, expected = scope.message, scope.call.values, scope.expected
        kind = message.kind
        keys = part.keys.items()
        values = part.values.items() if part.values else []
        records = data.maps.get(message.map_name)
        held: dict[bytes, bytes | None] = dict.fromkeys(keys)
        if records is not None:
            distinct = list(held)
            held = dict(zip(distinct, records.peek(distinct, self.ctx.records_ms), strict=True))
        chosen: list[int] = []
        written: list[bytes] = []
        answers: list[bytes | None] = []
        for position, key in enumerate(keys):
            current = held[key]
            if kind == SET_TTL:
                answers.append(b"" if current is not None else None)
                if current is not None:
                    chosen.append(position)
                    written.append(current)
                continue
            answers.append(current)
            if kind == PUT_IF_ABSENT:
                met = current is None
            elif kind == REPLACE:
                met = current is not None
            elif kind == REPLACE_IF_SAME:
                met = current is not None and current == expected[part.indexes[position]]
            else:  # REMOVE_IF_SAME
                met = current is not None and current == values[position]
            if met:
                chosen.append(position)
                if kind != REMOVE_IF_SAME:
                    written.append(values[position])
                held[key] = None if kind == REMOVE_IF_SAME else values[position]
        if out is not None:
            out.put_items(list(part.indexes), answers)
        run_keys = Column.of([keys[position] for position in chosen])
        ttls_ms = b""
        if kind != REMOVE_IF_SAME and chosen:
            ttls = part.ttls_ms if message.ttls_ms else self._uniform_ttls(scope.ttl_ms, len(keys))
            ttls_ms = b"".join([ttls[8 * p : 8 * p + 8] for p in chosen]) if ttls else b""
        return chosen, run_keys, Column.of(written), ttls_ms

    def _syncing(self, pid: int, map_name: str) -> bool:
        """A sync of the partition reads this map: its writes wait (the copy sent must not change)."""
        return any(map_name in sync.maps for sync in self.outgoing_syncs[pid].values())

    def _send_outbox(self) -> None:
        """One batch per backup for everything this event wrote."""
        batches: dict[MemberId, list[tuple[WriteRun, int]]] = {}
        runs, self.outbox = self.outbox, []
        for run, size, copies, skips in runs:
            pending = self.pending.get(run.partition_id)
            if pending is not None:
                pending.add_run(run, size, self.ctx.now_ms)
                lagging = pending.drop_unwaited_runs(self.ctx.config.max_backup_reorder_bytes)
                if lagging:
                    self.start_sync(run.partition_id, sorted(lagging))
            item = (run, size)
            for backup in copies:
                batches.setdefault(backup, []).append(item)
            if skips:
                bare = (run.without_data(), 0)
                for backup in skips:
                    batches.setdefault(backup, []).append(bare)
        for backup in sorted(batches):
            self._send_runs(backup, batches[backup])

    def _send_runs(self, backup: MemberId, runs: Sequence[tuple[WriteRun, int]]) -> None:
        """As few batches as fit in ``MAX_BACKUP_BATCH_BYTES`` each (a run fits alone: it is no
        larger than the client request that carried it), runs given with their sizes."""
        batch: list[WriteRun] = []
        size = 0
        for run, data_bytes in runs:
            run_bytes = data_bytes + len(run.map_name) + RUN_HEADER_BYTES  # what it takes on the wire
            if batch and (size + run_bytes > MAX_BACKUP_BATCH_BYTES or len(batch) >= MAX_RUNS_PER_BACKUP_BATCH):
                self.ctx.send(backup, BackupBatch(tuple(batch)))
                batch, size = [], 0
            batch.append(run)
            size += run_bytes
        if batch:
            self.ctx.send(backup, BackupBatch(tuple(batch)))

    def _runs_held_at(self, index: int, runs: Sequence[tuple[WriteRun, int]]) -> list[tuple[WriteRun, int]]:
        """``runs`` as the backup at replica ``index`` takes them: without the data of maps it keeps
        no copy of."""
        config = self.ctx.config
        return [item if config.keeps_copy(item[0].map_name, index) else (item[0].without_data(), 0) for item in runs]

    def _read_from_backup(self, call: PendingCall, message: MapRequest, part: Part, route: Route) -> bool:
        """Serve a read here, a backup, when the map allows it (seed 001's read_backup_data):
        never from a copy that is being replaced or that this slot does not keep."""
        map_config = self.ctx.config.map_config(message.map_name)
        if not map_config.read_backup_data or route.index < 0:
            return False
        if map_config.max_idle_seconds:
            return False  # idleness is the owner's to judge: a backup knows no reads (the owner answers)
        index = route.index
        pid = part.partition_id
        data = self.stores.get(pid)
        migrations = self.migrations
        if data is None or not 1 <= index <= map_config.total_backup_count or pid in self.incoming_syncs:
            return False
        if migrations is None or migrations.involved(pid):
            return False
        self._read_into(call, message, data, part)
        return True

    def _read_into(self, call: PendingCall, message: MapRequest, data: PartitionData, part: Part) -> None:
        """The values of ``part``'s keys, from this copy, into the call's answer (one engine call;
        an expired entry reads as absent). Reads stop at the call's answer budget: the keys past
        it are answered OVERLOADED, unread."""
        records = data.maps.get(message.map_name)
        out = call.values
        if not records or out is None:
            return
        indexes = part.indexes
        if message.kind == ENTRY_VIEW:
            views = records.packed_views(part.keys.items(), self.ctx.records_ms, call.answer_budget_bytes)
            call.answer_budget_bytes -= sum(map(len, filter(None, views)))
            out.put_items(list(indexes)[: len(views)], views)
            answered = len(views)
        else:
            values, lengths, present = records.get(part.keys, self.ctx.records_ms, call.answer_budget_bytes)
            call.answer_budget_bytes -= len(values)
            out.put_packed(indexes, values, lengths, present)
            answered = len(present)
        if answered < len(indexes):
            call.mark(indexes[answered:], ReplyCode.OVERLOADED)

    def _owner_refusal(
        self, pid: int, serving: bool, reading: bool, owner: MemberId | None
    ) -> tuple[ReplyCode, PartitionRedirect | None] | None:
        """Why this member does not serve ``pid`` as its owner now, with where the partition is
        for WRONG_OWNER; None when it does. The rules a get, a write and a scan share; a read also
        waits while the partition's migration allows no reads (``stale_read_disabled``, or the copy
        handed over). ``owner``: the partition's owner in the current table."""
        state = self.consensus.state
        table = state.table
        invariant(table is not None, "a request is served only with a table")
        if state.unavailable(pid):
            # Its owner is unreachable, and so is every other replica left: served by nobody,
            # and not reassigned empty, until one of them answers again (or is removed for good).
            # The owner itself, back but not yet marked so, serves it once it is.
            return (ReplyCode.UNAVAILABLE if owner != self.ctx.identity else ReplyCode.NOT_READY), None
        if owner != self.ctx.identity:
            if owner is None:
                return ReplyCode.NOT_READY, None
            return ReplyCode.WRONG_OWNER, PartitionRedirect(pid, table.versions[pid], owner.address)
        migrations = self.migrations
        if not serving or migrations is None:
            return ReplyCode.NOT_READY, None  # no lease: the leader may have given it away
        if reading:
            moving = migrations.writes_blocked(pid) and self.ctx.config.stale_read_disabled
            if moving or migrations.reads_blocked(pid):
                return ReplyCode.MIGRATING, None
        return None

    def _unavailable_reason(self, pid: int) -> str:
        state = self.consensus.state
        table = state.table
        holders = sorted({r.address for r in table.replicas[pid] if r is not None}) if table is not None else []
        return (
            f"partition {pid} is unavailable: every replica of it is on members that stopped answering "
            f"({', '.join(holders)}); it is served again when one answers, and reported lost after "
            "partition_lost_timeout_ms, or when an operator removes them or revives it"
        )

    def on_scan_request(self, client: str, message: ScanRequest) -> None:
        """A page of one partition's map, served by its owner under the same rules as a get (the
        reads a migration allows); the reply names the copy's lineage and the map's version, so the
        client can tell whether its pages belong together."""
        pid = message.partition_id
        call_id = message.call_id
        retry_after = self.ctx.config.client_retry_after_ms
        if pid >= self.ctx.config.partition_count:
            reason = f"partition {pid} does not exist: the cluster has {self.ctx.config.partition_count}"
            self.ctx.reply(client, ScanReply(call_id=call_id, code=ReplyCode.REJECTED, reason=reason))
            return
        refused = self._refusal(write=False)
        if refused is not None:
            self.ctx.reply(client, ScanReply(call_id=call_id, code=refused, retry_after_ms=retry_after))
            return
        standing_in = self.stand_ins.serves(pid, message.map_name)
        holds_lease = self.leases.holds()
        if standing_in:
            refusal = self.stand_ins.refusal(pid, holds_lease and self.migrations is not None)
        else:
            table = self.consensus.state.table
            invariant(table is not None, "a scan is served only with a table")
            refusal = self._owner_refusal(pid, holds_lease, True, table.replicas[pid][0])
            if refusal is None and self.stand_ins.owner_waits(pid, message.map_name, self.ctx.now_ms):
                refusal = ReplyCode.NOT_READY, None
        if refusal is not None:
            status, redirect = refusal
            wait_ms = retry_after if status in RETRYABLE else 0
            reason = self._unavailable_reason(pid) if status is ReplyCode.UNAVAILABLE else ""
            reply = ScanReply(call_id=call_id, code=status, redirect=redirect, retry_after_ms=wait_ms, reason=reason)
            self.ctx.reply(client, reply)
            return
        data = self.stand_ins.store(pid) if standing_in else self.store(pid)
        records = data.maps.get(message.map_name)
        # The engine's order is the same from one page to the next while the map does not change
        # (the version says when it did). A page covers positions from the offset; an expired
        # entry among them is left out, so the reply says where the next page starts.
        if records is None:
            page = EMPTY_SCAN_PAGE
            total = 0
        else:
            page = records.scan(
                message.offset, message.max_entries, self.ctx.records_ms, message.keys_only, MAX_REPLY_VALUE_BYTES
            )
            total = len(records)
        next_offset = max(page.next_offset, message.offset)
        more = next_offset < total
        version = data.version_of(message.map_name)
        if message.packed:
            reply = ScanReply(
                call_id=call_id,
                code=ReplyCode.OK,
                total=total,
                more=more,
                lineage=data.lineage,
                map_version=version,
                packed_keys=page.keys,
                key_lengths=page.key_lengths,
                packed_values=page.values,
                value_lengths=page.value_lengths,
                next_offset=next_offset,
            )
        else:
            reply = ScanReply(
                call_id=call_id,
                code=ReplyCode.OK,
                keys=tuple(split(page.keys, page.key_lengths)),  # type: ignore[arg-type]
                values=tuple(split(page.values, page.value_lengths)),  # type: ignore[arg-type]
                total=total,
                more=more,
                lineage=data.lineage,
                map_version=version,
                next_offset=next_offset,
            )
        self.ctx.reply(client, reply)

    def on_table_request(self, client: str, message: TableRequest) -> None:
        table = self.consensus.state.table
        count = self.ctx.config.partition_count
        start = message.first_partition
        if table is None or not (isinstance(start, int) and 0 <= start < count):
            if table is None and self.member_serves():
                self.request_assignment()
            self.ctx.reply(
                client,
                TableReply(
                    partition_count=count,
                    first_partition=start if isinstance(start, int) else 0,
                    addresses=(),
                    versions=(),
                    replicas=(),
                ),
            )
            return
        end = min(count, start + MAX_TABLE_REPLY_PARTITIONS)
        width = self.ctx.config.table_backup_count + 1
        index_of: dict[MemberId, int] = {}
        rows = []
        for pid in range(start, end):
            row = []
            for replica in table.replicas[pid][:width]:
                if replica is None:
                    row.append(-1)
                else:
                    row.append(index_of.setdefault(replica, len(index_of)))
            rows.append(tuple(row))
        addresses = tuple(replica.address for replica in index_of)
        versions = tuple(table.versions[pid] for pid in range(start, end))
        self.ctx.reply(
            client,
            TableReply(
                partition_count=count,
                first_partition=start,
                addresses=addresses,
                versions=versions,
                replicas=tuple(rows),
                more=end < count,
                unavailable=tuple(pid for pid in range(start, end) if self.consensus.state.unavailable(pid)),
            ),
        )

    def _reply(self, call: PendingCall) -> None:
        codes = call.codes
        retry_after = 0 if RETRYABLE.isdisjoint(codes) else self.ctx.config.client_retry_after_ms
        redirects = tuple(call.redirects[pid] for pid in sorted(call.redirects))
        if call.values is None:
            reply = MapReply(
                call_id=call.call_id,
                codes=bytes(codes),
                redirects=redirects,
                retry_after_ms=retry_after,
                reason=call.reason,
            )
            self.ctx.reply(call.client_address, reply)
            return
        values, present = call.values.columns()
        if len(values.data) <= MAX_REPLY_VALUE_BYTES:
            self._reply_part(call, 0, len(codes), values, present, redirects, retry_after, more=False)
            return
        # Split by the values' bytes so that every reply stays well under a frame (a reply this
        # large has few values: it is cut a value at a time).
        lengths = unpacked_lengths(values.lengths)
        start, size, offset, start_offset = 0, 0, 0, 0
        for index, value_bytes in enumerate(lengths):
            if index > start and size + value_bytes > MAX_REPLY_VALUE_BYTES:
                part = Column(values.data[start_offset:offset], values.lengths[4 * start : 4 * index])
                self._reply_part(call, start, index, part, present[start:index], redirects, retry_after, more=True)
                start, size, start_offset = index, 0, offset
            size += value_bytes
            offset += value_bytes
        part = Column(values.data[start_offset:], values.lengths[4 * start :])
        self._reply_part(call, start, len(codes), part, present[start:], redirects, retry_after, more=False)

    def _reply_part(
        self,
        call: PendingCall,
        start: int,
        end: int,
        values: Column,
        present: bytes,
        redirects: tuple[PartitionRedirect, ...],
        retry_after: int,
        more: bool,
    ) -> None:
        first = start == 0
        reply = MapReply(
            call_id=call.call_id,
            codes=bytes(call.codes[start:end]),
            values=values,
            present=present,
            redirects=redirects if first else (),
            retry_after_ms=retry_after if first else 0,
            reason=call.reason if first else "",
            first_index=start,
            more=more,
        )
        self.ctx.reply(call.client_address, reply)

    # --- owner: acknowledgements, retries, timeouts ------------------------------------------------

    def on_backup_acks(self, sender: MemberId, message: BackupAckBatch) -> None:
        holds = self.leases.holds()  # asked once for the batch: the clock stands still meanwhile
        pending_of = self.pending
        for pid, sequence in message.acks:
            pending = pending_of.get(pid)
            if pending is not None:
                if sequence > pending.acked.get(sender, -1):
                    pending.acked[sender] = sequence  # ``PendingPartition.acknowledge``, inline
                self._complete(pid, pending, holds)

    def _complete(self, pid: int, pending: PendingPartition, holds: bool | None = None) -> None:
        """Answer the writes every backup of theirs now holds; ``holds``: whether this member
        holds its lease (asked when not given)."""
        done = pending.complete()
        if done and holds is None:
            holds = self.leases.holds()
        for write in done:
            if not holds:
                # Every backup has it, but an owner without a lease may already have been replaced.
                write.call.mark(write.indexes, ReplyCode.INDETERMINATE)
            self._finish_write(write)
        if pending.idle:
            del self.pending[pid]

    def _finish_write(self, write: PendingWrite) -> None:
        self.pending_count -= len(write.indexes)
        self.pending_bytes -= write.size_bytes
        call = write.call
        call.open_writes -= 1
        if call.open_writes == 0:
            self._reply(call)

    def _fail(self, writes: list[PendingWrite]) -> None:
        for write in writes:
            write.call.mark(write.indexes, ReplyCode.INDETERMINATE)
            self._finish_write(write)

    def _make_room(
        self,
        call: PendingCall,
        message: MapRequest,
        pid: int,
        data: PartitionData,
        slots: Sequence[MemberId | None] | None,
        unit: Indexes,
        run_keys: Column,
        run_values: Column,
        size: int,
    ) -> bool:
        """Whether a put of ``run_keys`` may go ahead (``Upkeep.room_for``, which may evict for
        it); refused MEMORY_FULL otherwise, nothing applied."""
        renewal = message.kind == SET_TTL
        reason = self.upkeep.room_for(pid, data, message.map_name, slots, run_keys, run_values, size, renewal)
        if reason:
            self._refuse_memory_full(call, message, data, unit, reason)
            return False
        return True

    def _refuse_memory_full(
        self, call: PendingCall, message: MapRequest, data: PartitionData, unit: Indexes, reason: str = ""
    ) -> None:
        """Refuse the keys at ``unit`` MEMORY_FULL, nothing applied. A named write's refusal is
        remembered, so that a late copy of the same attempt is refused the same way rather than
        applied once memory is freed (the client was told it was not applied; found by an outside
        tester: a duplicated request applied 3 ms after its refusal)."""
        call.mark(unit, ReplyCode.MEMORY_FULL)
        call.reason = reason or self.upkeep.memory_full_reason()
        if message.client_id and message.write_id:
            data.writes.refuse(message.client_id, message.write_id, self.ctx.now_ms + NO_DEADLINE_TTL_MS)

    def _answer_too_large(self, call: PendingCall, message: MapRequest, unit: Indexes) -> bool:
        """Whether a conditional write's answer (the values held before, when asked for) passes
        the call's answer budget: then its keys are refused, nothing applied, rather than a reply
        of the same large value many times over (found by an outside tester: a 6 KB request
        naming one 1 MiB key 400 times grew a member by 400 MiB)."""
        out = call.values
        if out is None:
            return False
        answer_bytes = out.bytes_at(unit)
        if answer_bytes <= call.answer_budget_bytes:
            call.answer_budget_bytes -= answer_bytes
            return False
        out.clear(unit)
        call.mark(unit, ReplyCode.REJECTED)
        call.reason = (
            f"the values this {message.kind.value} would answer come to {answer_bytes} bytes, over the "
            f"{MAX_GET_ANSWER_BYTES} one call may answer: nothing applied; ask for fewer keys, or no previous values"
        )
        return True

    def _renewal_too_large(self, call: PendingCall, message: MapRequest, unit: Indexes, size: int) -> bool:
        """Whether a set_ttl's run (the values it writes again) would pass what one request may
        carry: then its keys are refused, nothing applied, as its run could not reach the backups
        in one frame (found by an outside tester: six 3 MiB values made a 19 MB backup batch,
        which the owner could not send, and it stopped working)."""
        if size <= MAX_REQUEST_DATA_BYTES:
            return False
        if call.values is not None:
            call.values.clear(unit)
        call.mark(unit, ReplyCode.REJECTED)
        call.reason = (
            f"the values this set_ttl would write again come to {size} bytes, over the {MAX_REQUEST_DATA_BYTES} "
            "one write may carry: nothing applied; name fewer keys"
        )
        return True

    def tick(self) -> None:
        self.upkeep.count()
        self.upkeep.expire_some()
        self._send_outbox()
        now = self.ctx.now_ms
        for pid in sorted(self.pending):
            pending = self.pending[pid]
            backups = self._backups_of(pid)
            pending.required = set(backups)
            expired = pending.expire(now)
            if expired:
                last = expired[-1].last_sequence
                lagging = {b for w in expired for b in w.backups if b in backups and not pending.holds(b, last)}
                self._fail(expired)
                self.start_sync(pid, sorted(lagging))
                if pending.idle:
                    del self.pending[pid]
                    continue
            if pending.idle:
                del self.pending[pid]
                continue
            overdue = pending.overdue(now, self.ctx.config.backup_ack_timeout_ms)
            if overdue:
                self.start_sync(pid, sorted(overdue))
            retry_ms = self.ctx.config.retry_interval_ms
            if now - pending.last_sent_ms >= retry_ms:
                slots = self.consensus.state.table.replicas[pid] if self.consensus.state.table else ()
                for backup in sorted(backups):
                    late = pending.runs_due_for(backup, now, retry_ms)
                    if late:
                        pending.last_sent_ms = now
                        self._send_runs(backup, self._runs_held_at(slots.index(backup), late))
        self._sync_tick()
        if now - self._last_summary_ms >= self.ctx.config.anti_entropy_interval_ms:
            self._last_summary_ms = now
            self._send_summaries()

    def resend_to(self, peer: MemberId) -> None:
        """``peer``'s connection came back: the runs it has not acknowledged and the sync chunks
        of its open windows go again now (it acknowledges what it holds already)."""
        table = self.consensus.state.table
        if table is None:
            return
        for pid in sorted(self.pending):
            pending = self.pending[pid]
            if pending.idle or peer not in self._backups_of(pid):
                continue
            slots = table.replicas[pid]
            self._send_runs(peer, self._runs_held_at(slots.index(peer), pending.runs_for(peer)))
        for pid in sorted(self.outgoing_syncs):
            sync = self.outgoing_syncs[pid].get(peer)
            if sync is None or sync.refused:
                continue
            sync.last_sent_ms = self.ctx.now_ms
            for chunk in sync.stream.outstanding():
                self.ctx.send(peer, chunk)

    # --- backup: applying in order ---------------------------------------------------------------

    def on_backup_batch(self, sender: MemberId, message: BackupBatch) -> None:
        table = self.consensus.state.table
        if table is None:
            return
        acks: dict[int, int] = {}
        count = table.partition_count
        stores, syncing = self.stores, self.incoming_syncs
        for run in message.runs:
            pid = run.partition_id
            if not 0 <= pid < count:
                continue
            route = self._route(pid, run.map_name)
            if route.slots[0] != sender or route.index < 1:
                continue  # not from the owner this member knows: fenced off (the sender retries)
            if not run.skipped and not route.keeps_copy:
                # The owner's table already puts this member at a hotter slot (a migration's
                # outcome reached it first): the copy of that map comes with the outcome here.
                # Taking the run now would acknowledge a write into a copy about to be replaced.
                continue
            data = stores.get(pid)
            if data is None or pid in syncing or data.lineage != run.lineage:
                continue  # not yet in the owner's lineage: its sync (or a timeout that starts one) fixes that
            if not _well_shaped(run):
                continue
            try:
                self._apply_in_order(pid, data, run)
            except ColumnError:
                continue  # columns the engine refused whole: nothing of the run applied, none acknowledged
            acks[pid] = data.sequence
        if acks:
            self.ctx.send(sender, BackupAckBatch(tuple(acks.items())))

    @staticmethod
    def _well_formed(run: WriteRun) -> bool:
        """Whether a run from the owner is fit to apply: its columns checked whole, as the engine
        takes them (a run that is not is dropped unacknowledged, nothing of it applied)."""
        if run.first_sequence < 1 or not 0 < len(run.map_name) <= MAX_MAP_NAME_CHARS:
            return False
        keys, values = run.keys, run.values
        if run.skipped:
            return not keys and not values and not run.ttls_ms and run.kind in (PUT, REMOVE)
        if not keys:
            return False
        try:
            count = check_column(
                keys.data, keys.lengths, max_items=MAX_OPERATIONS_PER_REQUEST, max_item_bytes=MAX_KEY_BYTES
            )
            if run.kind == PUT:
                held = check_column(
                    values.data, values.lengths, max_items=MAX_OPERATIONS_PER_REQUEST, max_item_bytes=MAX_VALUE_BYTES
                )
                return held == count and ttls_fit(run.ttls_ms, count)
        except ColumnError:
            return False
        return run.kind == REMOVE and not values and not run.ttls_ms

    def _apply_in_order(self, pid: int, data: PartitionData, run: WriteRun) -> None:
        """Apply what ``run`` adds after the sequence held; hold a run that comes early (bounded).
        Raises the engine's ``ColumnError``, nothing applied, for a run whose columns it refuses."""
        first = run.first_sequence
        if first == data.sequence + 1 and pid not in self.reorder:
            data.apply_run(run, 0, self.ctx.now_ms)  # the usual case: the next run, nothing held
            return
        if first > data.sequence + 1:
            if not self._well_formed(run):
                return  # checked whole before it is held: a held run is applied as it is
            held = self.reorder.setdefault(pid, {})
            config = self.ctx.config
            writes = sum(len(r.keys) or 1 for r in held.values()) + (len(run.keys) or 1)
            size = sum(columns_bytes(r.keys, r.values) + len(r.ttls_ms) for r in [*held.values(), run])
            if writes <= config.max_backup_reorder and size <= config.max_backup_reorder_bytes:
                held[run.first_sequence] = run
            return
        if run.last_sequence > data.sequence:
            data.apply_run(run, data.sequence + 1 - run.first_sequence, self.ctx.now_ms)
        self._drain_early_runs(pid, data)

    def _drain_early_runs(self, pid: int, data: PartitionData) -> None:
        """Apply the runs held early that now follow on from the sequence held."""
        held = self.reorder.get(pid)
        while held:
            first = min(held)
            if first > data.sequence + 1:
                break
            early = held.pop(first)
            # Held under another lineage (the partition changed hands since): its sequences mean
            # nothing here, and applying it would acknowledge a write this backup does not hold.
            if early.lineage == data.lineage and early.last_sequence > data.sequence:
                data.apply_run(early, data.sequence + 1 - early.first_sequence, self.ctx.now_ms)
        if held is not None and not held:
            del self.reorder[pid]

    # --- anti-entropy ------------------------------------------------------------------------------

    def _send_summaries(self) -> None:
        """Tell each backup where every settled partition this member owns stands."""
        table = self.consensus.state.table
        if table is None or not self.member_serves():
            return
        me = self.ctx.identity
        per_backup: dict[MemberId, tuple[list[int], list[str], list[int]]] = {}
        for pid, slots in enumerate(table.replicas):
            if slots[0] != me or not self.settled(pid) or (self.migrations and self.migrations.involved(pid)):
                continue
            data = self.stores.get(pid)
            if data is None:
                continue
            for backup in self._backups_in(slots):
                pids, lineages, sequences = per_backup.setdefault(backup, ([], [], []))
                pids.append(pid)
                lineages.append(data.lineage)
                sequences.append(data.sequence)
        for backup in sorted(per_backup):
            pids, lineages, sequences = per_backup[backup]
            self.ctx.send(backup, ReplicaSummary(tuple(pids), tuple(lineages), tuple(sequences)))

    def on_summary(self, sender: MemberId, message: ReplicaSummary) -> None:
        """Ask for a sync of each partition this backup holds behind its owner (bounded per summary),
        saying where it stands: the owner then sends just the maps changed since."""
        table = self.consensus.state.table
        columns = (message.partition_ids, message.lineages, message.sequences)
        if table is None or len({len(column) for column in columns}) != 1:
            return
        migrations = self.migrations
        asked = 0
        for pid, lineage, sequence in zip(*columns, strict=True):
            if asked >= self.ctx.config.max_parallel_replications:
                break
            if not 0 <= pid < table.partition_count or table.owner(pid) != sender or self._index_of(pid) < 1:
                continue
            if pid in self.incoming_syncs or (migrations is not None and migrations.involved(pid)):
                continue
            data = self.stores.get(pid)
            # Settled on the owner means every backup acknowledged its sequence: holding less, or
            # another lineage, this backup lost something.
            if data is None or data.lineage != lineage or data.sequence < sequence:
                held = -1 if data is None else data.sequence
                self.ctx.send(sender, ReplicaSyncRequest(pid, data.lineage if data else "", held))
                asked += 1

    # --- replica sync: what a backup lacks, from its owner -------------------------------------------

    def start_sync(self, pid: int, backups: Sequence[MemberId]) -> None:
        """Bring ``backups`` up to date: from the sequence each acknowledged, or whole."""
        pending = self.pending.get(pid)
        for backup in backups:
            base = pending.acked.get(backup, -1) if pending is not None else -1
            self._sync_to(pid, backup, base)

    def _sync_to(self, pid: int, backup: MemberId, base: int) -> None:
        table = self.consensus.state.table
        if table is None or table.owner(pid) != self.ctx.identity:
            return
        slots = table.replicas[pid]
        if backup not in self._backups_in(slots):
            return
        syncs = self.outgoing_syncs.setdefault(pid, {})
        if backup in syncs:
            return  # one at a time per backup: it asks again if this one does not do
        data = self.store(pid)
        if not data.versions_from <= base <= data.sequence:
            base = -1  # what the backup holds is unknown, or older than the versions tell apart
        config = self.ctx.config
        index = slots.index(backup)
        kept = [name for name in data.maps if config.keeps_copy(name, index)]
        names = kept if base < 0 else [name for name in kept if data.version_of(name) > base]
        self._sync_counter += 1
        sync = OutgoingSync(
            sync_id=f"{self.ctx.identity.uuid[:8]}-s{self._sync_counter}",
            partition_id=pid,
            backup=backup,
            stream=SendWindow.open(data.pieces(names), config.max_chunk_entries, config.max_chunk_bytes),
            maps=frozenset(names),
            base_sequence=base,
            replica_sequence=data.sequence,
            lineage=data.lineage,
            versions_from=data.versions_from,
            last_sent_ms=self.ctx.now_ms,
        )
        syncs[backup] = sync
        self._syncs_by_id[sync.sync_id] = sync
        self._fill_sync(sync)

    def _fill_sync(self, sync: OutgoingSync) -> None:
        config = self.ctx.config

        def build(index: int, piece: Piece, last: bool) -> ReplicaSyncChunk:
            map_name, version, page = piece
            return ReplicaSyncChunk(
                sync_id=sync.sync_id,
                partition_id=sync.partition_id,
                sequence=index,
                map_name=map_name,
                records=page,
                last=last,
                replica_sequence=sync.replica_sequence,
                lineage=sync.lineage,
                base_sequence=sync.base_sequence,
                map_version=version,
                versions_from=sync.versions_from,
                writers=self.store(sync.partition_id).writes.snapshot(self.ctx.now_ms) if last else (),
            )

        limit = window_chunks(config.migration_window_chunks, config.migration_fragments_enabled)
        chunks = sync.stream.fill(limit, build)  # the maps it reads take no writes: never raises
        if chunks:
            sync.last_sent_ms = self.ctx.now_ms
        for chunk in chunks:
            self.ctx.send(sync.backup, chunk)

    def _end_sync(self, sync: OutgoingSync) -> None:
        self._syncs_by_id.pop(sync.sync_id, None)
        syncs = self.outgoing_syncs.get(sync.partition_id)
        if syncs is not None and syncs.get(sync.backup) is sync:
            del syncs[sync.backup]
            if not syncs:
                del self.outgoing_syncs[sync.partition_id]

    def on_sync_ack(self, sender: MemberId, message: ReplicaSyncAck) -> None:
        sync = self._syncs_by_id.get(message.sync_id)
        if sync is None or sync.backup != sender:
            return
        pid = sync.partition_id
        if not message.accepted:
            if sync.base_sequence >= 0:
                # It no longer holds what the sync was based on: send it everything instead.
                self._end_sync(sync)
                self._sync_to(pid, sender, -1)
            else:
                # Its table may lag, or it lost track of this sync (a chunk came before the first):
                # a fresh sync follows at the next retry, for as long as it is a backup.
                sync.refused = True
            return
        sync.heard = True
        progressed, finished = sync.stream.acknowledge(message.sequence)
        if progressed:
            sync.refused = False  # it follows the sync after all (the refusal was overtaken)
        if message.complete or finished:
            self._end_sync(sync)
            pending = self.pending.get(pid)
            if pending is not None and sync.lineage == self.store(pid).lineage:
                # It holds the partition as of the sync: runs up to there are not owed to it, and
                # those after it go now rather than at the next retry.
                pending.acknowledge(sender, sync.replica_sequence)
                table = self.consensus.state.table
                if table is not None and sender in table.replicas[pid]:
                    index = table.replicas[pid].index(sender)
                    self._send_runs(sender, self._runs_held_at(index, pending.runs_for(sender)))
                self._complete(pid, pending)
        elif progressed:
            self._fill_sync(sync)

    def on_sync_chunk(self, sender: MemberId, message: ReplicaSyncChunk) -> None:
        pid = message.partition_id
        table = self.consensus.state.table
        if table is None or not 0 <= pid < table.partition_count:
            return
        # A backup that is also a migration's destination takes the sync all the same: the owner
        # snapshots the partition for the migration only once its syncs are done.
        index = self._index_of(pid)
        if table.owner(pid) != sender or index < 1:
            self.ctx.send(sender, ReplicaSyncAck(message.sync_id, -1, False))
            return
        if chunk_problem(message.map_name, message.records):
            return  # malformed: nothing taken, nothing acknowledged
        if message.writers and records_problem(message.writers):
            return
        incoming = self.incoming_syncs.get(pid)
        if incoming is None or incoming.sync_id != message.sync_id:
            held = self.stores.get(pid)
            if held is not None and held.lineage == message.lineage and held.sequence >= message.replica_sequence:
                # It already holds the partition as of this sync (it took it and the owner missed
                # the answer, or the sync started on old news): taking it would roll back writes
                # it acknowledged.
                self.ctx.send(sender, ReplicaSyncAck(message.sync_id, -1, True, complete=True))
                return
            if message.sequence != 0:
                # Of a sync it does not follow (its first chunk was lost, or a migration's data
                # replaced what it was taking): the owner starts over.
                self.ctx.send(sender, ReplicaSyncAck(message.sync_id, -1, False))
                return
            if incoming is not None and self._older_than(message, incoming.staging):
                return  # older than the sync this backup is taking
            if message.base_sequence >= 0 and not self._holds_base(pid, message):
                self.ctx.send(sender, ReplicaSyncAck(message.sync_id, -1, False))
                return
            staging: Staging[ReplicaSyncChunk] = Staging(
                hash_seed=self.ctx.hash_seed, max_idle_ms=self.ctx.config.max_idle_ms
            )
            incoming = IncomingSync(message.sync_id, message.base_sequence, staging)
            self.incoming_syncs[pid] = incoming
        config = self.ctx.config
        staging = incoming.staging
        staging.receive(message, window_chunks(config.migration_window_chunks, config.migration_fragments_enabled))
        if staging.complete:
            del self.incoming_syncs[pid]
            if incoming.base_sequence < 0:
                self.install(pid, staging.data(self.ctx.now_ms), index)
            elif self._holds_base(pid, message):
                data = self.stores[pid]
                data.replace_maps(staging.maps, staging.versions)
                data.writes.install(staging.writers, self.ctx.now_ms)
                data.sequence = staging.replica_sequence
                self._drain_early_runs(pid, data)
            else:
                self.ctx.send(sender, ReplicaSyncAck(message.sync_id, staging.held_through, False))
                return
        ack = ReplicaSyncAck(message.sync_id, staging.held_through, True, complete=staging.complete)
        self.ctx.send(sender, ack)

    @staticmethod
    def _older_than(message: ReplicaSyncChunk, taking: Staging[ReplicaSyncChunk]) -> bool:
        return taking.lineage == message.lineage and message.replica_sequence < taking.replica_sequence

    def _holds_base(self, pid: int, message: ReplicaSyncChunk) -> bool:
        """A sync of just the maps changed since ``base_sequence`` is right only on a copy of the
        owner's lineage at that sequence or later (and not yet at the sync's own)."""
        held = self.stores.get(pid)
        return (
            held is not None
            and held.lineage == message.lineage
            and message.base_sequence <= held.sequence < message.replica_sequence
        )

    def _sync_tick(self) -> None:
        # A sync is never abandoned while its backup is still a backup: until it holds the owner's
        # lineage it cannot take its writes (after_table_change drops former backups).
        now = self.ctx.now_ms
        for pid in sorted(self.outgoing_syncs):
            syncs = self.outgoing_syncs[pid]
            for backup in sorted(syncs):
                sync = syncs[backup]
                config = self.ctx.config
                waits_ms = config.transfer_resend_ms if sync.heard and not sync.refused else config.retry_interval_ms
                if now - sync.last_sent_ms < waits_ms:
                    continue
                if sync.refused:
                    self._end_sync(sync)
                    self.start_sync(pid, [backup])
                    continue
                sync.last_sent_ms = now
                for chunk in sync.stream.outstanding():
                    self.ctx.send(backup, chunk)

    # --- reacting to table changes ---------------------------------------------------------------

    def after_table_change(self, partition_ids: list[int]) -> None:
        """Drop data this member no longer replicates, stop waiting on former backups."""
        if self.consensus.state.table is None:
            return
        migrations = self.migrations
        for pid in sorted(set(partition_ids)):
            index = self._index_of(pid)
            if index == -1 and not (migrations is not None and migrations.involved(pid)):
                self.stores.pop(pid, None)
                self.reorder.pop(pid, None)
                self.incoming_syncs.pop(pid, None)
            data = self.stores.get(pid)
            if data is not None:
                if index == 0 and data.copy_index >= 1:
                    self._refresh_idle(data)
                self._trim(data, index)
            if index == 0:
                self.incoming_syncs.pop(pid, None)  # an owner takes no sync (it may have been promoted mid-one)
                backups = set(self._backups_of(pid))
                pending = self.pending.get(pid)
                if pending is not None:
                    pending.required = backups
                    self._complete(pid, pending)  # former backups are waited on no longer
                for sync in list(self.outgoing_syncs.get(pid, {}).values()):
                    if sync.backup not in backups:
                        self._end_sync(sync)
            else:
                self._fail_pending_writes(pid)
                for sync in list(self.outgoing_syncs.get(pid, {}).values()):
                    self._end_sync(sync)

    def _refresh_idle(self, data: PartitionData) -> None:
        """A backup's copy becomes the owner's: its maps with a max idle know each entry's last
        write only, not the reads the old owner served, so every entry gets a whole max idle
        from now (found by an outside tester: a failover dropped every entry reads kept alive)."""
        for name in self.ctx.config.max_idle_ms:
            records = data.maps.get(name)
            if records:
                records.touch(self.ctx.records_ms)

    def _fail_pending_writes(self, pid: int) -> None:
        """No longer the owner: writes still waiting for backups cannot be confirmed here."""
        pending = self.pending.pop(pid, None)
        if pending is not None:
            self._fail(pending.take_all())

    def on_table_assigned(self) -> None:
        """The first table: every partition is empty, so each replica starts with an empty store
        (a backup without one would drop its owner's writes until a resync)."""
        table = self.consensus.state.table
        if table is None:
            return
        for pid, slots in enumerate(table.replicas):
            if self.ctx.identity in slots:
                self.store(pid)

    def ask_for_missing_data(self) -> None:
        """Backups of partitions this member holds no data of (a snapshot named it) ask the owner."""
        table = self.consensus.state.table
        if table is None:
            return
        me = self.ctx.identity
        migrations = self.migrations
        for pid, slots in enumerate(table.replicas):
            owner = slots[0]
            if owner is None or owner == me or me not in slots or pid in self.stores or pid in self.incoming_syncs:
                continue
            if migrations is not None and migrations.involved(pid):
                continue
            self.ctx.send(owner, ReplicaSyncRequest(pid))

    def on_sync_request(self, sender: MemberId, message: ReplicaSyncRequest) -> None:
        pid = message.partition_id
        if not 0 <= pid < self.ctx.config.partition_count:
            return
        data = self.stores.get(pid)
        same_lineage = data is not None and data.lineage == message.lineage
        self._sync_to(pid, sender, message.sequence if same_lineage else -1)

    def sync_after_promotion(self, partition_ids: list[int]) -> None:
        """A promoted owner starts a new lineage and brings its backups into it."""
        table = self.consensus.state.table
        for pid in partition_ids:
            if table is not None and table.owner(pid) == self.ctx.identity:
                data = self.store(pid)
                data.lineage = f"{self.ctx.identity.uuid[:8]}@{table.versions[pid]}"
                if data.copy_index >= 1:
                    self._refresh_idle(data)
                data.copy_index = 0  # the owner's copy now, whatever slot it was kept for
                self.reorder.pop(pid, None)  # runs held from the old owner belong to its lineage
                self.incoming_syncs.pop(pid, None)
                self.start_sync(pid, self._backups_of(pid))

    def promoted_unseen(self, skip: set[int]) -> list[int]:
        """Partitions this member owns but holds as a backup's copy (other than ``skip``): a
        snapshot made it owner by promotion (the log entry that did is inside it), so
        ``sync_after_promotion`` never ran for them."""
        table = self.consensus.state.table
        if table is None:
            return []
        me = self.ctx.identity
        return [
            pid
            for pid, data in sorted(self.stores.items())
            if data.copy_index >= 1 and pid not in skip and table.owner(pid) == me
        ]

    def clear_serving_maps(self, partition_ids: Sequence[int]) -> None:
        """The partitions came back from unavailable (or this owner took a snapshot that may hide
        that they did): the maps served by a stand-in meanwhile (``serve_when_unavailable``) are
        emptied in those this member owns, through its backups as any remove is, so that no
        replica serves the entries from before while a stand-in took newer writes (dropped with
        it). Nothing to do for a map that chose to wait."""
        serving_maps = self.ctx.config.serving_maps
        table = self.consensus.state.table
        if not serving_maps or table is None:
            return
        for pid in partition_ids:
            data = self.stores.get(pid)
            if data is None or table.owner(pid) != self.ctx.identity:
                continue
            emptied = sorted(serving_maps.intersection(data.maps))
            # A sync streaming one of these maps reads records about to go: it ends here, and its
            # backups get a new one after the removal (found by an outside tester: the stream went
            # on with empty pages, never its last, and the map's writes waited on it for good).
            restart = [s.backup for s in self.outgoing_syncs.get(pid, {}).values() if s.maps.intersection(emptied)]
            for backup in restart:
                self._end_sync(self.outgoing_syncs[pid][backup])
            for map_name in emptied:
                self._remove_all(pid, data, map_name, table.replicas[pid])
            if restart:
                self.start_sync(pid, restart)
        self._send_outbox()

    def _remove_all(self, pid: int, data: PartitionData, map_name: str, slots: Sequence[MemberId | None]) -> None:
        """Every entry of the map in the partition, removed as runs of writes, each no larger than
        a request (so that each fits a backup batch)."""
        # Cut as a transfer cuts its pages, all of them before any is removed (the pages read the
        # live records).
        records = data.maps.get(map_name)
        if records is None:
            return
        pages = list(records.pages(MAX_OPERATIONS_PER_REQUEST, MAX_REQUEST_DATA_BYTES))
        for page in pages:
            self.remove_owned(pid, data, map_name, slots, Column(page.keys, page.key_lengths))

    def remove_owned(
        self,
        pid: int,
        data: PartitionData,
        map_name: str,
        slots: Sequence[MemberId | None] | None,
        chunk: Column,
    ) -> None:
        """A remove the owner decided itself (no client asked: the entries expired or went idle,
        were evicted, or a cache map is emptied), applied and replicated as one run of writes (no
        larger than a request). Nobody waits for its acknowledgement, but it is resent until
        every backup has it. ``slots`` None: a stand-in's copy, which has no backups."""
        records = data.maps.get(map_name)
        if records is None or not chunk:
            return
        now_ms = self.ctx.records_ms
        first = data.sequence + 1
        records.remove(chunk, now_ms)
        data.sequence += len(chunk)
        data.changed(map_name, data.sequence)
        if slots is None:
            return
        targets = self._route(pid, map_name)
        if not targets.backups:
            return
        run = WriteRun(
            partition_id=pid,
            lineage=data.lineage,
            first_sequence=first,
            kind=REMOVE,
            map_name=map_name,
            keys=chunk,
            values=EMPTY_COLUMN,
            written_ms=now_ms,
        )
        self.outbox.append((run, columns_bytes(chunk, EMPTY_COLUMN), targets.copies, targets.sequence_only))
        if pid not in self.pending:
            self.pending[pid] = PendingPartition(required=set(targets.backups), last_sent_ms=self.ctx.now_ms)

    def drop_everything(self) -> None:
        """This member left (or was removed): its data is no longer any replica's."""
        for pid in sorted(self.pending):
            self._fail(self.pending.pop(pid).take_all())
        self.stores.clear()
        self.reorder.clear()
        self.outgoing_syncs.clear()
        self._syncs_by_id.clear()
        self.incoming_syncs.clear()
        self.stand_ins.drop_everything()


def _by_partition(partition_ids: Sequence[int]) -> dict[int, Indexes]:
    """Each partition's keys in a request, by position, in the order the partitions first come.
    Ids sent in order (the data source sorts its batches by partition) give one range per
    partition, found by bisection: nothing per key but the check that they are in order."""
    count = len(partition_ids)
    groups: dict[int, Indexes] = {}
    if list(partition_ids) == sorted(partition_ids):
        start = 0
        while start < count:
            pid = partition_ids[start]
            end = bisect_right(partition_ids, pid, start)
            groups[pid] = range(start, end)
            start = end
        return groups
    lists: dict[int, list[int]] = {}
    for index, pid in enumerate(partition_ids):
        lists.setdefault(pid, []).append(index)
    groups.update(lists)
    return groups


def _apply(
    data: PartitionData,
    map_name: str,
    kind: str,
    indexes: Indexes,
    out: Answer | None,
    run_keys: Column,
    run_values: Column,
    now_ms: int,
    ttls_ms: bytes = b"",
) -> int:
    """A put or remove of ``run_keys`` (to ``run_values``), the request's keys at ``indexes``,
    into ``data`` at ``now_ms`` (the record clock), living ``ttls_ms`` (packed, one per key;
    empty: until removed), the previous values into ``out`` when the caller asked for them.
    One engine call, whatever the number of keys. Returns how much the engine's memory count
    grew (negative: shrank)."""
    previous = out is not None
    if kind is PUT:
        records = data.maps.get(map_name)
        if records is None:
            records = data.records_for_writing(map_name)
        found, grown = records.put(run_keys, run_values, now_ms, ttls_ms=ttls_ms or None, previous=previous)
        data.sequence += len(run_keys)
        data.versions[map_name] = data.sequence  # it holds what it was just given: not empty
    else:
        records = data.maps.get(map_name)
        found, grown = records.remove(run_keys, now_ms, previous=previous) if records is not None else (None, 0)
        data.sequence += len(run_keys)
        data.changed(map_name, data.sequence)
    if out is not None and found is not None:
        out.put_packed(indexes, *found)
    return grown


def _well_shaped(run: WriteRun) -> bool:
    """The checks of a run from the owner that the engine does not make when it applies the run
    (which checks its columns whole, and refuses it all, ``ColumnError``, when one is bad)."""
    if run.first_sequence < 1 or not 0 < len(run.map_name) <= MAX_MAP_NAME_CHARS:
        return False
    if run.skipped:
        return not run.keys and not run.values and not run.ttls_ms and run.kind in (PUT, REMOVE)
    if run.kind is PUT:
        return len(run.keys) > 0
    return run.kind is REMOVE and len(run.keys) > 0 and not run.values and not run.ttls_ms
