"""Client requests on a member: map operations on a partition's owner (or a backup, for reads a
map allows there, or a stand-in, for a map that chose availability), scans, and table requests.

The owner serves a partition only while the member is active, its applied table names it owner,
it holds a lease, and no migration of the partition blocks it. It applies a write and hands it to
the owner's replication (``owner_replication``), which sends it to the partition's backups; the
answer goes only when every sync backup acknowledged and the lease still holds (sync backups, seed
001), so an acknowledged write is on the owner and every backup. A write is named by its client
(``write_records``): a partition that applied it answers a retry as it answered the first.

A request is checked whole before any of it is applied: a malformed one changes nothing.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from shardgrid._engine import UNREAD, ColumnError, check_column, partitions_of, split
from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import (
    MAX_ENTRIES_PER_CHUNK,
    MAX_FRAME_BYTES,
    MAX_GET_ANSWER_BYTES,
    MAX_MAP_NAME_CHARS,
    MAX_OPERATIONS_PER_REQUEST,
    MAX_REPLY_VALUE_BYTES,
    MAX_TABLE_REPLY_PARTITIONS,
    MAX_TTL_MS,
    MAX_VALUE_BYTES,
)
from shardgrid.core.member.answer import Answer, Indexes
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.leases import Leases
from shardgrid.core.member.owner_replication import OwnerReplication
from shardgrid.core.member.replica_sync import ReplicaSyncs
from shardgrid.core.member.replication import PendingCall
from shardgrid.core.member.request_parts import Part, request_parts
from shardgrid.core.member.routes import Route, Routes
from shardgrid.core.member.upkeep import put_growth_bytes
from shardgrid.core.messages import (
    EMPTY_COLUMN,
    ENTRY_VIEW,
    GET,
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
    Column,
    MapReply,
    MapRequest,
    OpKind,
    PartitionRedirect,
    ReplyCode,
    ScanReply,
    ScanRequest,
    TableReply,
    TableRequest,
    WriteRun,
)
from shardgrid.core.records import EMPTY_SCAN_PAGE, MapRecords, read_parts, read_routed, ttls_fit
from shardgrid.core.store import PartitionData, columns_bytes, counted_bytes, unpacked_lengths, unpacked_numbers
from shardgrid.core.table import PartitionTable
from shardgrid.core.write_records import NO_DEADLINE_TTL_MS, RECORD_GRACE_MS, WINDOW_IDS, Seen

if TYPE_CHECKING:
    from shardgrid.core.member.data import DataPath

# Every operation a request may name (a set of its members: ``in`` takes any value, in every
# Python version, unlike ``in OpKind`` on 3.11).
KINDS = frozenset(OpKind)
# The writes whose owner decides per key whether to write: each answers the value held before.
CONDITIONAL = frozenset({PUT_IF_ABSENT, REPLACE, REPLACE_IF_SAME, REMOVE_IF_SAME, SET_TTL})
# The keys and values of one request: a frame less room for what the owner's backup batch adds to
# them (its lineage and sequence), so that forwarding an accepted request always fits a frame.
MAX_REQUEST_DATA_BYTES = MAX_FRAME_BYTES - 64 * 1024


_UNREAD_BYTE = bytes([UNREAD])  # a key an answer's budget left unread (``_engine.get_parts``)


class MigrationView(Protocol):
    """What the data path asks of the migration participant."""

    def writes_blocked(self, pid: int) -> bool: ...
    def reads_blocked(self, pid: int) -> bool: ...
    def involved(self, pid: int) -> bool: ...
    def any_writes_blocked(self, pids: Iterable[int]) -> bool: ...
    def room_ahead_bytes(self) -> int: ...


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
    # A get whose keys came side by side: the parts to read here, gathered for one engine call
    # after every partition was judged (``_read_gathered``); None: each part is read as judged.
    reads: list[tuple[PartitionData, Part]] | None = None


class ClientRequests:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        leases: Leases,
        data: DataPath,
        routes: Routes,
        owner: OwnerReplication,
        syncs: ReplicaSyncs,
        member_serves: Callable[[], bool],
        unavailable: Callable[[], ReplyCode | None],
        request_assignment: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.leases = leases
        self.data = data
        self.routes = routes
        self.owner = owner
        self.syncs = syncs
        self.member_serves = member_serves
        self.unavailable = unavailable  # NOT_READY or SHUTTING_DOWN while the member serves nothing
        self.request_assignment = request_assignment
        self.stand_ins = data.stand_ins
        self.upkeep = data.upkeep
        self.migrations: MigrationView | None = None  # wired by the member (they ask each other)
        self._owned: tuple[object, MemberId | None, frozenset[int]] = (None, None, frozenset())  # _owned_here

    def on_map_request(self, client: str, message: MapRequest, sent_ms: int | None = None) -> None:
        """``sent_ms``: when the client sent it, on this member's clock (no later than it was)."""
        count = len(message.keys) if len(message.keys) <= MAX_OPERATIONS_PER_REQUEST else 0
        problem, parts, key_partitions = self._request_problem(message)
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
        elif key_partitions is None or not self._read_owned(call, message, key_partitions):
            if parts is None:  # a get judged partition by partition after all: its columns were checked
                parts = self._parts_of_checked(call, message)
            scope = self._scope(call, message, sent_ms, len(parts))
            for part in parts:
                self._execute(scope, part)
            if scope.reads:
                self._read_gathered(scope)
            self.owner.send_outbox()
        if call.open_writes == 0:
            self.reply(call)

    def _scope(self, call: PendingCall, message: MapRequest, sent_ms: int | None, partitions: int) -> Scope:
        """``partitions``: how many the request's keys are in."""
        config = self.ctx.config
        map_config = config.map_config(message.map_name)
        kind = message.kind
        writes = kind not in READS
        fits_whole = False
        ttl_ms = message.ttl_ms if message.ttl_ms >= 0 else map_config.time_to_live_ms
        if writes and not (map_config.bounded and not map_config.evicts):
            # As ``Upkeep.room_for`` counts each partition's put: every key new, its size counted,
            # and the map opened in each of the request's partitions.
            size = columns_bytes(message.keys, message.values)
            expires = bool(message.ttls_ms) or ttl_ms > 0
            keys = len(message.keys)
            growth = put_growth_bytes(keys, size, expires=expires, new_maps=partitions, map_name=message.map_name)
            fits_whole = self.upkeep.fits(growth) and not self.upkeep.disk_short()
        return Scope(
            call=call,
            message=message,
            serving=self.leases.holds() and self.migrations is not None,
            expires_ms=self._record_expiry(message, sent_ms),
            expected=message.expected.items() if kind == REPLACE_IF_SAME else [],
            ttl_ms=ttl_ms,
            stand_in_map=message.map_name in config.serving_maps,
            evicts_over_size=map_config.evicts and map_config.bounded,
            fits_whole=fits_whole,
            any_unavailable=self.consensus.state.any_unavailable(),
            records_ms=self.ctx.records_ms,
            reads=[] if kind is GET and partitions > 1 else None,
        )

    def _record_expiry(self, message: MapRequest, sent_ms: int | None) -> int:
        """Until when a partition remembers that it applied this request's write: no attempt of
        it can arrive after its deadline (and a grace for the clocks); without one, long."""
        if message.deadline_ms and sent_ms is not None:
            return sent_ms + message.deadline_ms + RECORD_GRACE_MS
        return self.ctx.now_ms + NO_DEADLINE_TTL_MS

    def _request_problem(self, message: MapRequest) -> tuple[str, list[Part] | None, array | None]:
        """What makes the request unfit to serve ('' when nothing), and its keys cut by partition;
        for a get, the partitions its keys are in instead (``_read_owned`` may read it whole). The
        codec checked every field's type; the engine checks the columns whole (counts, lengths,
        each key's and value's bound) and cuts them, in one call."""
        kind, keys, values, expected = message.kind, message.keys, message.values, message.expected
        count = len(keys)
        # (The codec checked these of a request from a client; not of one built in the process.)
        if kind not in KINDS:
            return f"unknown operation {kind!r}", [], None
        if not 0 < len(message.map_name) <= MAX_MAP_NAME_CHARS:
            return f"a map name is 1 to {MAX_MAP_NAME_CHARS} characters", [], None
        if count > MAX_OPERATIONS_PER_REQUEST:
            return f"{count} keys in one request, over the limit of {MAX_OPERATIONS_PER_REQUEST}", [], None
        if len(values) != (count if kind in WITH_VALUES else 0):
            return "one value per key for a write of values, and none otherwise", [], None
        if len(expected) != (count if kind == REPLACE_IF_SAME else 0):
            return "one expected value per key for a replace_if_same (none otherwise)", [], None
        if message.ttl_ms >= 0 and kind not in WITH_TTL:
            return f"a TTL is a put's or a replace's, not a {kind.value}'s", [], None
        if message.ttls_ms:
            if kind not in WITH_TTL or message.ttl_ms >= 0:
                return "TTLs per key are a put's or a replace's, and not given with a TTL for the request", [], None
            if len(message.ttls_ms) != 8 * count or not ttls_fit(message.ttls_ms, count, MAX_TTL_MS):
                return f"TTLs per key are one unsigned 64-bit number per key, each at most {MAX_TTL_MS} ms", [], None
        data_bytes = len(keys.data) + len(values.data) + len(expected.data)
        if counted_bytes(data_bytes, count + len(values) + len(expected)) > MAX_REQUEST_DATA_BYTES:
            return f"keys and values of one request are at most {MAX_REQUEST_DATA_BYTES} bytes", [], None
        try:
            if expected:
                check_column(
                    expected.data, expected.lengths, max_items=count, max_item_bytes=MAX_VALUE_BYTES, what="expected"
                )
            if kind is GET and count > 1:
                # Every column split_by_partition would check (found by an outside tester: values
                # of a get, unchecked, reached request_parts when the get was served partition by
                # partition after all, which raised out of handle() and ended the member).
                check_column(values.data, values.lengths, max_items=0, max_item_bytes=0, what="values")
                ids = partitions_of(keys.data, keys.lengths, self.ctx.config.partition_count)
                return "", None, unpacked_lengths(ids)
            parts = request_parts(message, self.ctx.config.partition_count)
        except ColumnError as error:
            return f"malformed columns: {error}", [], None
        return "", parts, None

    def _parts_of_checked(self, call: PendingCall, message: MapRequest) -> list[Part]:
        """The parts of a request whose columns ``_request_problem`` checked (so the engine takes
        them); should it refuse them all the same, every key is refused, never the member ended."""
        try:
            return request_parts(message, self.ctx.config.partition_count)
        except ColumnError as error:
            call.mark(range(len(call.codes)), ReplyCode.REJECTED)
            call.reason = f"malformed columns: {error}"
            return []

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
        route = self.routes.of(pid, map_name)
        slots = route.slots
        owner = slots[0]
        me = self.ctx.identity
        reading = kind in READS
        if owner != me and reading and scope.serving and self._read_from_backup(scope, part, route):
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
        data = self.data.held(pid)
        if data is None:
            data = self.data.store(pid)
        if reading:
            self._read_into(scope, data, part)
            return
        if moving or self.syncs.blocks(pid, map_name):
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
        if not self.owner.backlog_allows(len(run_keys), size):
            call.mark(indexes, ReplyCode.OVERLOADED)
            return
        # After the backlog's check: a write refused OVERLOADED (retried) takes no memory allowance
        # (found by an outside tester: five OVERLOADED refusals made the next write MEMORY_FULL).
        if (
            kind is PUT
            and not (scope.fits_whole and message.kind is PUT)
            and not self._make_room(call, message, pid, data, slots, unit, run_keys, run_values, size, bool(ttls_ms))
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
        journal = self.data.journal
        if not route.backups and journal is None:
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
        if journal is not None:
            journal.run(run, 0)
            if not route.backups:
                if kind is PUT and scope.evicts_over_size:
                    self.upkeep.evict_over_size(pid, data, map_name, slots)
                return
        pending = self.owner.queue(run, size, route)
        if route.sync:  # async backups only: nobody is waited on (the run is still resent until they have it)
            self.owner.wait_for_backups(pending, call, first, data.sequence, indexes, route.sync, size)
        if kind is PUT and scope.evicts_over_size:
            self.upkeep.evict_over_size(pid, data, map_name, slots)

    @staticmethod
    def _uniform_ttls(ttl_ms: int, count: int) -> bytes:
        """``count`` entries' TTL of ``ttl_ms`` each, packed (empty: until removed)."""
        return ttl_ms.to_bytes(8, "little") * count if ttl_ms else b""

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
            self._read_into(scope, data, part)
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
            expires = bool(ttls_ms)
            if kind == PUT and not self._make_room(
                call, message, pid, data, None, unit, run_keys, run_values, size, expires
            ):
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
        refused = data.writes.refused(message.client_id, message.write_id, now)
        if refused is not None:
            call.mark(unit, refused)
            call.reason = self.upkeep.full_reason(refused)
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
        if not self.owner.acknowledged_through(pid, applied_through):
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

    def _read_from_backup(self, scope: Scope, part: Part, route: Route) -> bool:
        """Serve a read here, a backup, when the map allows it (seed 001's read_backup_data):
        never from a copy that is being replaced or that this slot does not keep."""
        map_config = self.ctx.config.map_config(scope.message.map_name)
        if not map_config.read_backup_data or route.index < 0:
            return False
        if map_config.max_idle_seconds:
            return False  # idleness is the owner's to judge: a backup knows no reads (the owner answers)
        index = route.index
        pid = part.partition_id
        data = self.data.held(pid)
        migrations = self.migrations
        if data is None or not 1 <= index <= map_config.total_backup_count or self.syncs.receiving(pid):
            return False
        if migrations is None or migrations.involved(pid):
            return False
        self._read_into(scope, data, part)
        return True

    def _read_into(self, scope: Scope, data: PartitionData, part: Part) -> None:
        """The values of ``part``'s keys, from this copy, into the call's answer (one engine call;
        an expired entry reads as absent), or gathered for ``_read_gathered``. Reads stop at the
        call's answer budget: the keys past it are answered OVERLOADED, unread."""
        call, message = scope.call, scope.message
        reads = scope.reads
        if reads is not None and isinstance(part.indexes, range):
            reads.append((data, part))
            return
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

    def _owned_here(self, table: PartitionTable) -> frozenset[int]:
        """The partitions ``table`` names this member the owner of, worked out once per table (a
        test per partition for every get cost a get_all of 1,000 keys a third of its member time
        over the engine's read)."""
        me = self.ctx.identity
        held_table, held_me, owned = self._owned
        if held_table is not table or held_me != me:
            owned = frozenset(pid for pid, slots in enumerate(table.replicas) if slots[0] == me)
            self._owned = (table, me, owned)
        return owned

    def _read_owned(self, call: PendingCall, message: MapRequest, key_partitions: array) -> bool:
        """A get whose every partition this member serves as owner now, read whole in one engine
        call, each key from its partition's copy (``_engine.get_routed``), with no cut of its
        columns by partition: what ``_execute`` would judge each of those partitions (the owner
        here, holding its lease, nothing unavailable or moving, no stand-in for the map) and
        read, in one step. False, having read nothing: it is judged partition by partition. A
        get_all of 1,000 keys over 94 partitions spent 0.18 ms cutting them and about as much
        again on the partitions' Python work, against 0.1 ms in the engine."""
        migrations = self.migrations
        if migrations is None or not self.leases.holds():
            return False
        state = self.consensus.state
        map_name = message.map_name
        if state.any_unavailable() or map_name in self.ctx.config.serving_maps:
            return False
        table = state.table
        invariant(table is not None, "a request is served only with a table")
        if not self._owned_here(table).issuperset(key_partitions) or migrations.any_writes_blocked(key_partitions):
            return False
        stores = self.data.records_of(key_partitions, map_name)
        out = call.values
        invariant(out is not None, "a get answers values")
        budget = call.answer_budget_bytes
        values, lengths, present = read_routed(
            map_name, self.ctx.config.partition_count, message.keys, stores, self.ctx.records_ms, budget
        )
        call.answer_budget_bytes -= len(values)
        every_key = range(len(present))
        out.put_packed(every_key, values, lengths, self._unread_overloaded(call, every_key, present))
        return True

    @staticmethod
    def _unread_overloaded(call: PendingCall, indexes: Indexes, present: bytes) -> bytes:
        """``present`` as the reply carries it: keys the answer budget left unread (``UNREAD``,
        rare: past 16 MiB of values) answered OVERLOADED, and absent."""
        if UNREAD not in present:
            return present
        call.mark([indexes[at] for at, state in enumerate(present) if state == UNREAD], ReplyCode.OVERLOADED)
        return present.replace(_UNREAD_BYTE, b"\x00")

    def _read_gathered(self, scope: Scope) -> None:
        """The gathered parts of a get (``Scope.reads``), read in one engine call, in request order
        as the parts came, into the call's answer: each partition's keys read from the copy its
        judgement chose, as ``_read_into`` would one at a time (a part of a get_all of a thousand
        keys over ninety partitions cost about as much as its engine read; the parts' Python work
        is what bounded get_all). Each part's reads stop at the answer budget, as ``_read_into``'s
        do: its keys past it are answered OVERLOADED, unread, and the next part's are read with
        what is left."""
        call, map_name, reads = scope.call, scope.message.map_name, scope.reads
        out = call.values
        if not reads or out is None:
            return
        gathered = [(data.maps.get(map_name), part.keys) for data, part in reads]
        values, lengths, present, ends = read_parts(map_name, gathered, scope.records_ms, call.answer_budget_bytes)
        call.answer_budget_bytes -= len(values)
        first, last = reads[0][1].indexes, reads[-1][1].indexes  # ranges, in request order
        keys = len(present)  # one presence byte per key of every part
        side_by_side = isinstance(first, range) and isinstance(last, range) and last.stop - first.start == keys
        if side_by_side and UNREAD not in present:
            # Every part read whole, and no request position between them left out: one piece.
            out.put_packed(range(first.start, first.start + keys), values, lengths, present)
            return
        value_ends = unpacked_numbers(ends)
        key_at = value_at = 0
        for index, (_, part) in enumerate(reads):
            indexes = part.indexes
            key_end, value_end = key_at + len(indexes), value_ends[index]
            part_present = self._unread_overloaded(call, indexes, present[key_at:key_end])
            out.put_packed(indexes, values[value_at:value_end], lengths[4 * key_at : 4 * key_end], part_present)
            key_at, value_at = key_end, value_end

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
        data = self.stand_ins.store(pid) if standing_in else self.data.store(pid)
        records = data.maps.get(message.map_name)
        if message.with_metadata:
            self._reply_records(client, message, data, records)
            return
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

    def _reply_records(
        self, client: str, message: ScanRequest, data: PartitionData, records: MapRecords | None
    ) -> None:
        """A scan page of the records with their metadata (``ScanRequest.with_metadata``)."""
        if not message.packed:
            reason = "records with their metadata come as packed columns only"
            self.ctx.reply(client, ScanReply(call_id=message.call_id, code=ReplyCode.REJECTED, reason=reason))
            return
        total = len(records) if records is not None else 0
        page, next_offset = None, message.offset
        if records is not None and message.offset < total and message.max_entries:
            max_entries = min(message.max_entries, MAX_ENTRIES_PER_CHUNK)
            page, next_offset = records.dump_page(message.offset, max_entries, MAX_REPLY_VALUE_BYTES)
        next_offset = max(next_offset, message.offset)
        reply = ScanReply(
            call_id=message.call_id,
            code=ReplyCode.OK,
            total=total,
            more=next_offset < total,
            lineage=data.lineage,
            map_version=data.version_of(message.map_name),
            packed_keys=page.keys if page is not None else b"",
            key_lengths=page.key_lengths if page is not None else b"",
            packed_values=page.values if page is not None else b"",
            value_lengths=page.value_lengths if page is not None else b"",
            metadata=page.metadata if page is not None else b"",
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

    def reply(self, call: PendingCall) -> None:
        """Send the call's answer (in parts, when its values pass ``MAX_REPLY_VALUE_BYTES``)."""
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
        expires: bool,
    ) -> bool:
        """Whether a put of ``run_keys`` (``expires``: with a time to live) may go ahead
        (``Upkeep.room_for``, which may evict for it); refused MEMORY_FULL otherwise, nothing
        applied."""
        reason = self.upkeep.disk_full_reason()
        if reason:
            self._refuse_full(call, message, data, unit, ReplyCode.DISK_FULL, reason)
            return False
        renewal = message.kind == SET_TTL
        reason = self.upkeep.room_for(pid, data, message.map_name, slots, run_keys, run_values, size, renewal, expires)
        if reason:
            self._refuse_full(call, message, data, unit, ReplyCode.MEMORY_FULL, reason)
            return False
        return True

    def _refuse_full(
        self, call: PendingCall, message: MapRequest, data: PartitionData, unit: Indexes, code: ReplyCode, reason: str
    ) -> None:
        """Refuse the keys at ``unit`` with ``code`` (MEMORY_FULL or DISK_FULL), nothing applied. A
        named write's refusal is remembered, so that a late copy of the same attempt is refused the
        same way rather than applied once there is room (the client was told it was not applied;
        found by an outside tester: a duplicated request applied 3 ms after its refusal)."""
        call.mark(unit, code)
        call.reason = reason
        if message.client_id and message.write_id:
            data.writes.refuse(message.client_id, message.write_id, self.ctx.now_ms + NO_DEADLINE_TTL_MS, code)

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
